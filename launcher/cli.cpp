#include "launcher/cli.hpp"

#include <algorithm>
#include <cctype>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "common/version.hpp"
#include "launcher/config_builder.hpp"


namespace ddprun {
namespace {

constexpr std::string_view kNodes = "Nodes and rendezvous";
constexpr std::string_view kWorkers = "Workers";
constexpr std::string_view kFailures = "Failures and restarts";
constexpr std::string_view kOutput = "Output and logs";
constexpr std::string_view kHosts = "Several hosts from one command";
constexpr std::string_view kWatch = "Watching a running job (see also: ddprun status --help)";

struct OptionSpec {
  std::string_view name;        // long name with dashes, without "--"
  std::string_view short_name;  // one letter or empty
  std::string_view value_name;  // empty for a boolean flag
  std::string_view group;
  std::string_view help;
  HostsRole hosts = HostsRole::kTravels;  // where it goes in a one-command job
};

// Every flag of torchrun's contract plus ddprun's own, and what each means to a one-command
// job. Defaults live in LaunchConfig; the help repeats them for the reader.
constexpr OptionSpec kOptions[] = {
    {"nnodes", "", "N|MIN:MAX", kNodes, "Number of nodes, or an elastic range [1]",
     HostsRole::kSetPerHost},
    {"node-rank", "", "RANK", kNodes, "This node's rank, static rendezvous only [0]",
     HostsRole::kSetPerHost},
    {"master-addr", "", "ADDR", kNodes, "Node 0's address, static only; IPv6 as [::1] [127.0.0.1]",
     HostsRole::kSetPerHost},
    {"master-port", "", "PORT", kNodes, "Node 0's port, static only [29500]",
     HostsRole::kSetPerHost},
    {"rdzv-backend", "", "NAME", kNodes, "static, c10d or etcd (both elastic) [static]"},
    {"rdzv-endpoint", "", "HOST[:PORT]", kNodes,
     "c10d store address [port 29400];\netcd: HOST[:PORT],... [localhost:2379]",
     HostsRole::kSetPerHost},
    {"rdzv-id", "", "ID", kNodes, "Job id, becomes TORCHELASTIC_RUN_ID [none]",
     HostsRole::kSetPerHost},
    {"rdzv-conf", "", "K=V,...", kNodes,
     "Rendezvous settings (seconds): join_timeout [600],\nlast_call_timeout [30], "
     "close_timeout [30], read_timeout [60],\nkeep_alive_interval [5]; also "
     "keep_alive_max_attempt [3], is_host;\netcd: etcd_prefix [/ddprun]"},
    {"standalone", "", "", kNodes, "One node: rendezvous in the agent's memory, random run id",
     HostsRole::kSetPerHost},
    {"local-addr", "", "ADDR", kNodes, "This node's address as other nodes see it [hostname]",
     HostsRole::kSetPerHost},
    {"token-file", "", "PATH", kNodes,
     "The job's secret: the store and every agent must\nshare it [$DDPRUN_TOKEN; --hosts: a random one]",
     HostsRole::kCommandOnly},

    {"nproc-per-node", "", "N|cpu|gpu|auto", kWorkers, "Workers on this node [1]",
     HostsRole::kSetPerHost},
    {"role", "", "NAME", kWorkers, "ROLE_NAME of the workers [default]"},
    {"module", "m", "", kWorkers, "Run PROGRAM as a Python module (python -u -m)"},
    {"no-python", "", "", kWorkers, "Execute PROGRAM directly, without Python"},
    {"run-path", "", "", kWorkers, "Run PROGRAM with the Python interpreter"},
    {"start-method", "", "METHOD", kWorkers, "spawn, fork or forkserver; accepted, always spawn"},
    {"monitor-interval", "", "SECONDS", kWorkers, "Accepted; ddprun sees worker exits at once"},
    {"pass-local-rank", "", "", kWorkers,
     "Pass --local_rank=N to the script, as\ntorch.distributed.launch does without --use-env"},
    {"use-env", "", "", kWorkers,
     "torch.distributed.launch's flag; accepted: the\nworkers always get LOCAL_RANK in the environment"},
    {"virtual-local-rank", "", "", kWorkers,
     "Every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES\nholding only its own GPU (taken from this "
     "one's)"},
    {"mpi-env", "", "", kWorkers,
     "Also give workers Open MPI's OMPI_COMM_WORLD_RANK,\n_SIZE, _LOCAL_RANK, _LOCAL_SIZE and _NODE_RANK"},
    {"numa-binding", "", "MODE", kWorkers,
     "Bind each worker to its GPU's CPUs: node, socket,\nexclusive or core-complex (GPU = LOCAL_RANK) [none]"},
    {"cpu-bind", "", "MODE", kWorkers,
     "Bind workers without regard to GPUs: numa or socket\n(spread ranks round-robin), core (a share "
     "of the\ncores each) [none]"},

    {"max-restarts", "", "N", kFailures, "Restarts of all workers after a failure [0]"},
    {"warm-standby", "", "", kFailures,
     "Keep a Python interpreter per local rank that has\nimported torch (or =MOD,... ) for the next "
     "restart [off]"},
    {"signals-to-handle", "", "SIG,...", kFailures,
     "Signals forwarded to workers [SIGTERM,SIGINT,SIGHUP,SIGQUIT]"},
    {"shutdown-timeout", "", "SECONDS", kFailures, "Grace between forwarded signal and SIGKILL [30]"},
    {"exit-barrier-timeout", "", "SECONDS", kFailures,
     "Wait for the other nodes after success [300]"},
    {"hang-timeout", "", "SECONDS", kFailures,
     "A job whose workers show no progress (no output line,\nno FileTimer request) for this "
     "long is hung: stacks\nare taken and it restarts or fails [0: off]"},
    {"node-check", "", "MODE", kFailures,
     "Check every node before the first workers start (room\nto write, /dev/shm, ulimits, "
     "GPUs, clocks, links):\nwarn names what it finds, refuse also ends the job\n(exit 120), "
     "exclude (--nnodes=MIN:MAX) starts\nwithout the nodes named [off]"},
    {"node-check-mib", "", "MIB", kFailures,
     "What each node sends to each of two others to measure\nthe links in --node-check; 0: "
     "links not checked [4]"},

    {"log-dir", "", "DIR", kOutput, "Per-rank log files [a temp dir, when redirecting]"},
    {"redirects", "r", "0-3|R:V,...", kOutput,
     "Worker streams to files: 0 none, 1 stdout, 2 stderr,\n3 both; or per local rank, "
     "e.g. 0:3,1:2 [0]"},
    {"tee", "t", "0-3|R:V,...", kOutput, "Like --redirects, and also to the console [0]"},
    {"local-ranks-filter", "", "R,...", kOutput, "Local ranks whose output reaches the console [all]"},
    {"log-line-prefix", "", "TEMPLATE", kOutput,
     "Console prefix: {rank} {local_rank} {node} {host}\n{role} {time} "
     "[\"[{role}{local_rank}]:\"]"},
    {"log-line-prefix-template", "", "TEMPLATE", kOutput,
     "torchrun's form: ${rank} ${local_rank} ${role_name}"},
    {"raw-output", "", "", kOutput, "Workers write straight to the console, no prefix"},
    {"fold-output", "", "", kOutput,
     "The same line from many ranks shown once, then\n\"[ranks 1-7] the same: ...\": on (numbers "
     "may\ndiffer), exact, off, or auto: on a terminal [auto]"},
    {"duplicate-stdout-filters", "", "TEXT,...", kOutput,
     "Console lines holding any TEXT also go to\nattempt_<n>/filtered_stdout.log (,, is a comma)"},
    {"duplicate-stderr-filters", "", "TEXT,...", kOutput,
     "The same for stderr: filtered_stderr.log"},
    {"events-file", "", "PATH", kOutput, "Append agent events as JSON lines (monotonic times)"},
    {"event-log-handler", "", "NAME", kOutput,
     "torchrun's event handler; accepted: ddprun's events\ngo to --events-file"},
    {"logs-specs", "", "NAME", kOutput,
     "torchrun's logs_specs plug-in, a Python class:\nrefused (ddprun loads no Python)"},
    {"log-level", "", "LEVEL", kOutput, "trace, debug, info, warn or error [info]"},
    {"metrics-port", "", "PORT", kWatch,
     "Serve Prometheus metrics on /metrics at this port;\n0: one the kernel picks [off]"},
    {"metrics-addr", "", "ADDR", kWatch,
     "The address metrics are served on; another host\nreaches them only if you say so [127.0.0.1]"},
    {"dry-run", "", "", kOutput,
     "Print the plan (hosts, ranks, commands, worker\nenvironment) and exit; --dry-run=json for tools",
     HostsRole::kCommandOnly},
    {"progress-interval", "", "SECONDS", kOutput,
     "A long wait says how far it got after this, then\nat doubling intervals up to a minute; 0: never [10]"},

    {"hosts", "H", "HOST[:SLOTS],...", kHosts,
     "Start an agent on every host over ssh; SLOTS\nworkers there [--nproc-per-node]; the first is the master;\n"
     "slurm: every node of this Slurm allocation, over srun",
     HostsRole::kCommandOnly},
    {"hostfile", "", "FILE", kHosts, "Hosts one per line: host, host slots=N or host:N",
     HostsRole::kCommandOnly},
    {"ssh-command", "", "CMD", kHosts,
     "How to reach a host; the host is appended\n[\"ssh -o BatchMode=yes\"]",
     HostsRole::kNeedsHosts},
    {"remote-ddprun", "", "PATH", kHosts, "ddprun on the hosts [this ddprun's absolute path]",
     HostsRole::kNeedsHosts},
    {"no-stage", "", "", kHosts,
     "A host without this ddprun at --remote-ddprun fails\nthe preflight [it gets a copy in its cache]",
     HostsRole::kNeedsHosts},
    {"connect-timeout", "", "SECONDS", kHosts, "Every host reached and checked within this [30]",
     HostsRole::kNeedsHosts},
    {"hangup-timeout", "", "SECONDS", kHosts,
     "A remote agent that hears nothing from this\ncommand for this long stops its workers [10]",
     HostsRole::kNeedsHosts},
    {"fanout", "", "N", kHosts,
     "Connections opened at once; with a tree, hosts\neach agent starts [32]",
     HostsRole::kNeedsHosts},
    {"tree-threshold", "", "N", kHosts,
     "More hosts than this: tree fan-out, agents start\nthe agents of their subtree [64]",
     HostsRole::kNeedsHosts},
};

// CLI11 reads "--log-dir=" (an empty value, typical of a script expanding an unset variable)
// like "--log-dir" and takes the next argument as the value, swallowing the program. So every
// "--name=" gets this marker appended before parsing; it turns back into an empty value, and
// is stripped again from the program's arguments, which therefore stay byte-for-byte intact.
constexpr std::string_view kEmptyMarker = "\x1f<empty>";

std::string strip_empty_marker(std::string text) {
  for (auto pos = text.find(kEmptyMarker); pos != std::string::npos;
       pos = text.find(kEmptyMarker, pos)) {
    text.erase(pos, kEmptyMarker.size());
  }
  return text;
}

// "nproc-per-node" -> "NPROC_PER_NODE", for PET_*.
std::string env_suffix(std::string_view name) {
  std::string out(name);
  for (char& c : out) {
    c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

// torchrun also reads the line prefix's template from its own variable, after PET_*.
std::string torchelastic_env_name(std::string_view name) {
  return name == "log-line-prefix-template" ? "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE" : "";
}

// "-r,--redirects". torchrun's underscore spellings are not registered with CLI11: each name
// costs every later registration and every argument a comparison, so they are rewritten to
// ours before parsing instead (with_our_spelling).
std::string cli11_names(const OptionSpec& spec) {
  std::string names = spec.short_name.empty() ? "" : fmt::format("-{},", spec.short_name);
  return names + fmt::format("--{}", spec.name);
}

constexpr std::string_view kForwardShort = "x";  // -x NAME[=VALUE], not in kOptions

const OptionSpec* find_option(std::string_view long_name, std::string_view short_name) {
  for (const auto& spec : kOptions) {
    if (long_name.empty() ? spec.short_name == short_name : spec.name == long_name) return &spec;
  }
  return nullptr;
}

// CLI11's own long options, which an abbreviation may also name (argparse's --he is --help).
constexpr std::string_view kBuiltinLongNames[] = {"help", "version"};

// torchrun's long options over its versions (1.13 to 2.x), in our spelling: where ddprun's own
// options make a prefix ambiguous that torchrun reads as one of these, the prefix means what
// it means to torchrun (--event=x is --event-log-handler, not also --events-file). The log
// line prefix's template is torchrun's variable, not one of its options.
constexpr std::string_view kTorchrunLongNames[] = {
    "nnodes", "nproc-per-node", "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf",
    "standalone", "max-restarts", "monitor-interval", "start-method", "event-log-handler", "role",
    "module", "no-python", "run-path", "log-dir", "redirects", "tee", "local-ranks-filter",
    "node-rank", "master-addr", "master-port", "local-addr", "logs-specs", "numa-binding",
    "virtual-local-rank", "signals-to-handle", "duplicate-stdout-filters",
    "duplicate-stderr-filters", "help"};

// Rewrites ddprun's own arguments, which end at the program (the first positional) or at
// "--", to the names CLI11 knows: torchrun's spelling (--nproc_per_node) and abbreviations
// (--nproc_per=2) become --nproc-per-node. The program's own arguments are never touched.
// Walks the arguments as CLI11 will, so that an option's value is not taken for the program.
// Returns the error for an ambiguous abbreviation.
std::optional<std::string> with_our_spelling(std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto& arg = args[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') return std::nullopt;
    if (arg[1] != '-') {  // -r 3, -r3, -r=3, -x NAME
      const auto letter = std::string_view(arg).substr(1, 1);
      const auto* spec = find_option({}, letter);
      const bool takes_value =
          letter == kForwardShort || (spec != nullptr && !spec->value_name.empty());
      if (takes_value && arg.size() == 2) ++i;
      // argparse reads -r=3 as -r 3; CLI11 would keep the '='.
      if (takes_value && arg.size() > 3 && arg[2] == '=') arg.erase(2, 1);
      continue;
    }
    const auto end = std::min(arg.find('='), arg.size());
    std::string name = arg.substr(2, end - 2);
    std::replace(name.begin(), name.end(), '_', '-');
    auto match = ddprun::match_long_option(name);
    if (!match.candidates.empty()) {
      std::vector<std::string> dashed;
      for (const auto& candidate : match.candidates) dashed.push_back("--" + candidate);
      return fmt::format("ambiguous option {} could match {} (see ddprun --help)",
                         arg.substr(0, end), fmt::join(dashed, ", "));
    }
    if (match.name.empty()) continue;  // unknown: CLI11 leaves it, and it is reported below
    const bool inline_value = end < arg.size();
    arg.replace(2, end - 2, match.name);
    const auto* spec = find_option(match.name, {});
    if (spec != nullptr && !inline_value && !spec->value_name.empty()) ++i;  // --nnodes 2
  }
  return std::nullopt;
}

// Shows an option's names as "-r, --redirects", and our usage line, which has a positional
// program CLI11 does not know about.
class HelpFormatter final : public CLI::Formatter {
 public:
  HelpFormatter() { column_width(40); }

  // The blank line after the usage replaces the one CLI11 puts before every group, which
  // doubles up with the one it also puts between groups.
  std::string make_usage(const CLI::App*, std::string) const override {
    return "\nUsage: ddprun [OPTIONS] PROGRAM [ARGS...]\n\n";
  }

  std::string make_group(std::string group, bool is_positional,
                         std::vector<const CLI::Option*> opts) const override {
    std::string out = group + ":\n";
    for (const CLI::Option* opt : opts) out += make_option(opt, is_positional);
    return out;
  }

  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    if (is_positional) return CLI::Formatter::make_option_name(opt, is_positional);
    std::string out;
    for (const auto& name : opt->get_snames()) out += "-" + name + ", ";
    for (const auto& name : opt->get_lnames()) out += "--" + name + ", ";
    return out.substr(0, out.size() - 2);
  }
};

// The parser and the storage its options write into. Values stay text; config_builder
// gives them meaning, so environment values go through exactly the same checks.
struct Parser {
  CLI::App app{"ddprun: launch and supervise distributed PyTorch workers (torchrun-compatible)",
               "ddprun"};
  // By OptionSpec::name; map nodes keep their addresses, which CLI11 writes through. Flags
  // are bound to text too ("true", or the value of --flag=VALUE), so that a bad boolean gets
  // the same message from the command line as from PET_*.
  std::map<std::string, std::string> values;
  std::map<std::string, CLI::Option*> options;
  std::vector<std::string> forward;  // -x, repeatable

  Parser() {
    app.formatter(std::make_shared<HelpFormatter>());
    // Stop at the first positional: it is the program, and the rest is its own.
    app.prefix_command();
    app.set_version_flag("--version", fmt::format("ddprun {}", ddprun_version()),
                         "Print the version and exit");
    app.footer(
        "Every flag also accepts torchrun's underscore spelling (--nproc_per_node) and, as\n"
        "torchrun does, any unambiguous prefix of its name (--nproc_per=4). It can also be\n"
        "set as PET_<FLAG> in the environment (PET_NPROC_PER_NODE=4, PET_NO_PYTHON=1); the\n"
        "command line wins. Everything after PROGRAM is passed to it untouched.");
    for (const auto& spec : kOptions) {
      std::string key(spec.name);
      std::string help(spec.help);
      CLI::Option* opt = spec.value_name.empty()
                             ? app.add_flag(cli11_names(spec), values[key], help)
                             : app.add_option(cli11_names(spec), values[key], help)
                                   ->type_name(std::string(spec.value_name));
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->group(std::string(spec.group));
      options[key] = opt;
    }
    app.add_option(fmt::format("-{}", kForwardShort), forward,
                   "NAME or NAME=VALUE: environment for every worker\non every host (repeatable)")
        ->type_name("NAME[=VALUE]")
        ->expected(1)
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->group(std::string(kHosts));
  }

  // Command-line values, then PET_* for the flags the command line left out.
  RawOptions collect(const std::map<std::string, std::string>& env) const {
    RawOptions raw;
    for (const auto& spec : kOptions) {
      std::string key(spec.name);
      if (options.at(key)->count() > 0) {
        raw[key] = RawValue{strip_empty_marker(values.at(key)), fmt::format("--{}", key), true};
        continue;
      }
      for (std::string env_name : {"PET_" + env_suffix(key), torchelastic_env_name(key)}) {
        auto it = env.find(env_name);
        if (env_name.empty() || it == env.end() || it->second.empty()) continue;
        raw[key] = RawValue{it->second, env_name, false};
        break;
      }
    }
    return raw;
  }
};

CliOutcome usage_error(std::string message) {
  // One line, whatever CLI11 or a parser produced.
  message = strip_empty_marker(std::move(message));
  std::replace(message.begin(), message.end(), '\n', ' ');
  return CliOutcome{std::nullopt, kExitUsage, "ddprun: " + message, {}, {}};
}

}  // namespace

HostsRole hosts_role(std::string_view flag) {
  for (const auto& spec : kOptions) {
    if (spec.name == flag) return spec.hosts;
  }
  return HostsRole::kTravels;
}

std::vector<std::string_view> flags_with_hosts_role(HostsRole role) {
  std::vector<std::string_view> names;
  for (const auto& spec : kOptions) {
    if (spec.hosts == role) names.push_back(spec.name);
  }
  return names;
}

std::vector<std::string_view> long_option_names() {
  std::vector<std::string_view> names;
  for (const auto& spec : kOptions) names.push_back(spec.name);
  names.insert(names.end(), std::begin(kBuiltinLongNames), std::end(kBuiltinLongNames));
  return names;
}

LongOptionMatch match_long_option(std::string_view name) {
  if (name.empty()) return {};
  std::vector<std::string> candidates;
  for (auto known : long_option_names()) {
    if (known == name) return {std::string(name), {}};
    if (known.starts_with(name)) candidates.emplace_back(known);
  }
  if (candidates.size() == 1) return {std::move(candidates.front()), {}};
  if (candidates.empty()) return {};
  const auto of_torchrun = std::count_if(candidates.begin(), candidates.end(), is_torchrun_option);
  if (of_torchrun == 1) {
    return {*std::find_if(candidates.begin(), candidates.end(), is_torchrun_option), {}};
  }
  return {{}, std::move(candidates)};
}

bool is_torchrun_option(std::string_view name) {
  return std::find(std::begin(kTorchrunLongNames), std::end(kTorchrunLongNames), name) !=
         std::end(kTorchrunLongNames);
}

std::string help_text() {
  Parser parser;
  return parser.app.help();
}

CliOutcome parse_command_line(const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& env) {
  Parser parser;
  try {
    std::vector<std::string> reversed = args;
    if (auto ambiguous = with_our_spelling(reversed)) return usage_error(*ambiguous);
    // CLI11 consumes a reversed vector from the back.
    std::reverse(reversed.begin(), reversed.end());
    for (auto& arg : reversed) {
      if (arg.size() > 3 && arg.starts_with("--") && arg.ends_with("=")) arg += kEmptyMarker;
    }
    parser.app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return CliOutcome{std::nullopt, kExitOk, parser.app.help(), {}, {}};
  } catch (const CLI::CallForVersion& e) {
    return CliOutcome{std::nullopt, kExitOk, e.what(), {}, {}};
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }

  // With prefix_command, CLI11 leaves unknown options, a "--" separator, the program and its
  // arguments, in that order, in remaining().
  std::vector<std::string> rest = parser.app.remaining();
  for (auto& arg : rest) {
    if (arg.ends_with(kEmptyMarker)) arg.resize(arg.size() - kEmptyMarker.size());
  }
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest.front().size() > 1 && rest.front().front() == '-') {
    return usage_error(fmt::format("unknown option {} (see ddprun --help)", rest.front()));
  }

  try {
    BuiltConfig built = build_launch_config(parser.collect(env), rest, env, parser.forward);
    return CliOutcome{std::move(built.config), kExitOk, {}, std::move(built.notes),
                      std::move(built.warnings)};
  } catch (const ConfigError& e) {
    return usage_error(e.what());
  }
}

}  // namespace ddprun
