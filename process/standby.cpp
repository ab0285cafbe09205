#include "process/standby.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace ddprun {

namespace {

// Everything but the attempt's variables, sorted: what a standby's imports may have read.
std::vector<std::string> lasting_env(const std::vector<std::string>& env,
                                     const StandbyOptions& options) {
  std::vector<std::string> out;
  for (const auto& kv : env) {
    const auto name = kv.substr(0, kv.find('='));
    if (std::find(options.attempt_variables.begin(), options.attempt_variables.end(), name) ==
        options.attempt_variables.end()) {
      out.push_back(kv);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// What the bootstrap runs as a cold `python` would: a module (-m) or a source file. A directory
// or zip archive (their __main__.py) and compiled .pyc files start cold.
bool runs_as_source(const std::string& script) {
  if (script == "-m") return true;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(script, ec)) return false;
  const auto ext = std::filesystem::path(script).extension();
  if (ext == ".pyc" || ext == ".pyz" || ext == ".zip") return false;
  std::ifstream in(script, std::ios::binary);
  char magic[2] = {};
  in.read(magic, 2);
  return !(magic[0] == 'P' && magic[1] == 'K');  // a zip archive, whatever its name
}

bool is_python_launch(const WorkerLaunch& launch) {
  return launch.argv.size() >= 3 && launch.argv[1] == kUnbufferedFlag;
}

}  // namespace

// Runs in __main__ of `python -u -c`. Everything it needs is local to the function: the
// handover empties __main__'s namespace, as a cold start finds it, before the program runs in
// it. The program's frames are the only ones its tracebacks show.
const char* standby_bootstrap() {
  return R"PY(def _ddprun_standby():
    import sys
    if not sys.flags.safe_path:
        del sys.path[0]  # -c's '' (the working directory): nothing of it is imported here
    import builtins as b, json, os, socket
    sock = socket.socket(fileno=int(os.environ.pop("DDPRUN_STANDBY_FD")))
    channel = sock.makefile("rb")
    plan = json.loads(channel.readline())
    args = plan["args"]
    as_module = args[0] == "-m"
    # sys.path[0] as a cold start sets it, before anything is imported.
    if not sys.flags.safe_path:
        sys.path.insert(0, os.getcwd() if as_module else os.path.dirname(os.path.realpath(args[0])))
    import importlib, importlib.util
    before = dict(os.environ)
    failed = None
    for name in plan["modules"]:
        try:
            if not plan["optional"] or importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
        except Exception as e:
            failed = "failed importing %s: %s: %s" % (name, type(e).__name__, e)
            break
    # What the imports did to the environment, which a cold start's imports would do too.
    imported_env = {k: v for k, v in os.environ.items() if before.get(k) != v}
    imported_unset = [k for k in before if k not in os.environ]
    try:
        sock.sendall(("%s\n" % (failed or "ready")).encode())
    except OSError:
        pass  # handed over before it was ready: the agent no longer listens
    line = channel.readline()
    if not line:
        os._exit(0)
    go = json.loads(line)
    channel.close()
    sock.close()
    os.environ.clear()
    os.environ.update(go["env"])
    for k, v in imported_env.items():
        if k in before or k not in go["env"]:
            os.environ[k] = v
    for k in imported_unset:
        os.environ.pop(k, None)
    sys.orig_argv = go["orig_argv"]
    main = sys.modules["__main__"]
    names = main.__dict__
    kept = {k: names[k] for k in ("__name__", "__doc__", "__package__", "__spec__", "__builtins__")}
    names.clear()
    names.update(kept, __annotations__={})
    # From here on the program fills __main__, which is this function's globals: the builtins
    # below are reached through `b`, never by a name the program may have taken.
    try:
        if as_module:
            import runpy
            sys.argv = ["-m"] + args[2:]
            runpy._run_module_as_main(args[1], True)
        else:
            from importlib.machinery import SourceFileLoader
            sys.argv = b.list(args)
            path = os.path.abspath(args[0])
            try:
                with b.open(path, "rb") as f:
                    source = f.read()
            except b.OSError as e:
                b.print("%s: can't open file %r: [Errno %d] %s" % (go["orig_argv"][0], path, e.errno,
                        e.strerror), file=sys.stderr)
                os._exit(2)
            names.update(__file__=path, __cached__=None, __loader__=SourceFileLoader("__main__", path))
            b.exec(b.compile(source, path, "exec", dont_inherit=True), names)
    except b.SystemExit:
        raise
    except b.BaseException as e:
        # The printed traceback is the exception's own: this function's frame comes off it.
        e = e.with_traceback(e.__traceback__.tb_next)
        sys.excepthook(b.type(e), e, e.__traceback__)
        if b.isinstance(e, b.KeyboardInterrupt):
            import signal
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)
_ddprun_standby()
)PY";
}

std::optional<WorkerLaunch> standby_launch(const WorkerLaunch& launch,
                                           const StandbyOptions& options) {
  WorkerLaunch s = launch;
  if (!options.native) {
    if (!is_python_launch(launch) || !runs_as_source(launch.argv[2])) return std::nullopt;
    s.argv = {launch.argv[0], kUnbufferedFlag, "-c", standby_bootstrap()};
  }
  s.env = lasting_env(launch.env, options);
  return s;
}

bool standby_serves(const WorkerLaunch& a, const WorkerLaunch& b, const StandbyOptions& options) {
  return a.argv == b.argv && a.placement.cpus == b.placement.cpus &&
         a.placement.mem_nodes == b.placement.mem_nodes && a.output.raw == b.output.raw &&
         a.output.stdout_file.empty() == b.output.stdout_file.empty() &&
         a.output.stderr_file.empty() == b.output.stderr_file.empty() &&
         lasting_env(a.env, options) == lasting_env(b.env, options);
}

std::string standby_plan_message(const WorkerLaunch& launch, const StandbyOptions& options) {
  nlohmann::json plan;
  const std::size_t skipped = options.native ? 1 : 2;  // the program, or `python -u`
  plan["args"] = std::vector<std::string>(launch.argv.begin() + std::min(skipped, launch.argv.size()),
                                          launch.argv.end());
  plan["modules"] = options.modules.empty() ? std::vector<std::string>{"torch"} : options.modules;
  plan["optional"] = options.modules.empty();
  return plan.dump() + "\n";
}

std::string standby_handover_message(const std::vector<std::string>& env,
                                     const std::vector<std::string>& orig_argv) {
  nlohmann::json go;
  auto& vars = go["env"] = nlohmann::json::object();
  for (const auto& kv : env) {
    const auto eq = kv.find('=');
    vars[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  go["orig_argv"] = orig_argv;
  return go.dump() + "\n";
}

}  // namespace ddprun
