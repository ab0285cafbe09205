// bench_train: figure 8, CPU training throughput. ResNet-18 on 32x32 synthetic images, batch
// 32 per rank, 2 ranks, Gloo, both programs started by ddprun with the same OMP_NUM_THREADS:
// build/workers/ddp_resnet (libtorch, C++) against scripts/reference_ddp.py (torch DDP). Each
// prints "samples_per_sec: X" per epoch on rank 0; the last epoch's value is the sample (the
// first epochs include the warm-up of the allocator and the process group). When a program is
// missing, a row says so instead.

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>

#include <fmt/format.h>

#include "bench/bench_cli.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "testing/child.hpp"

using namespace ddprun;
using namespace ddprun::bench;
using namespace std::chrono_literals;

namespace {

// The last "samples_per_sec: X" in a log, or a negative number.
double last_samples_per_sec(const std::string& log) {
  static const std::regex re(R"(samples_per_sec:\s*([0-9.eE+-]+))");
  const auto text = read_text(log);
  double last = -1;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    last = std::strtod((*it)[1].str().c_str(), nullptr);
  }
  return last;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_train: figure 8, ddp_resnet vs the Python DDP reference under ddprun"};
  CommonOptions common;
  std::string ddprun_binary, ddp_resnet, reference, python = "/usr/bin/python3";
  std::string threads = "1";
  int steps = 20, epochs = 2;
  std::vector<std::string> extra;
  add_common_options(app, common);
  app.add_option("--ddprun", ddprun_binary, "the ddprun binary")->required();
  app.add_option("--ddp-resnet", ddp_resnet, "the ddp_resnet binary");
  app.add_option("--reference", reference, "scripts/reference_ddp.py");
  app.add_option("--python", python, "Python with torch")->capture_default_str();
  app.add_option("--threads", threads, "OMP_NUM_THREADS for every rank")->capture_default_str();
  app.add_option("--steps", steps, "steps per epoch")->capture_default_str();
  app.add_option("--epochs", epochs, "epochs (the last one is measured)")->capture_default_str();
  app.add_option("--args", extra, "more arguments for both programs");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return guarded_main("bench_train", [&] {
    const auto case_name =
        fmt::format("ResNet-18, 32x32 synthetic, batch 32 per rank, 2 ranks, Gloo, "
                    "OMP_NUM_THREADS={}", threads);
    Series cpp, py;
    for (auto* s : {&cpp, &py}) {
      s->figure = 8;
      s->case_name = case_name;
      s->metric = "training throughput (last epoch)";
      s->unit = "samples/s";
      s->lower_is_better = false;
    }
    cpp.subject = "ddp_resnet (libtorch C++)";
    py.subject = "scripts/reference_ddp.py (torch DDP, Python)";
    cpp.target_vs = py.subject;
    cpp.target_ratio = 1.0;
    cpp.target_text = ">= 1.0x the Python reference";
    namespace fs = std::filesystem;
    std::string missing;
    if (ddp_resnet.empty() || !fs::exists(ddp_resnet)) missing = "ddp_resnet not built";
    if (reference.empty() || !fs::exists(reference)) {
      missing += std::string(missing.empty() ? "" : ", ") + "scripts/reference_ddp.py missing";
    }
    if (!missing.empty()) {
      for (auto* s : {&cpp, &py}) {
        s->measured = false;
        s->note = "not measured: " + missing;
        append_series(common.results, *s);
      }
      return;
    }
    TempDir dir("train");
    std::vector<std::string> args{"--arch",       "resnet18", "--backend",   "gloo",
                                  "--batch_size", "32",       "--use_syn",   "--image_size",
                                  "32",           "--steps_syn", std::to_string(steps),
                                  "--num_epochs", std::to_string(epochs), "--model_dir",
                                  dir.file("models")};
    args.insert(args.end(), extra.begin(), extra.end());
    struct Program {
      Series* series;
      std::vector<std::string> argv;
    };
    std::vector<Program> programs{{&cpp, {"--no-python", ddp_resnet}}, {&py, {reference}}};
    for (auto& p : programs) p.argv.insert(p.argv.end(), args.begin(), args.end());
    repeat(common, [&](int i, bool recorded) {
      for (std::size_t k = 0; k < programs.size(); ++k) {
        auto& p = programs[k];
        std::vector<std::string> cmd{ddprun_binary, "--nproc-per-node=2",
                                      fmt::format("--master-port={}", free_port())};
        cmd.insert(cmd.end(), p.argv.begin(), p.argv.end());
        const auto log = dir.file(fmt::format("run{}-{}.log", i, k));
        test::Child job({cmd, {{"OMP_NUM_THREADS", threads}, {"PYTHON_EXEC", python}}, log});
        const int status = job.wait(600s);
        const double value = last_samples_per_sec(log);
        if (test::exit_code(status) != 0 || value <= 0) {
          dir.keep();
          throw Error(fmt::format("{}: exit {}, samples_per_sec {}; output ({}):\n{}",
                                  p.series->subject, test::exit_code(status), value, log,
                                  tail(log, 15)));
        }
        if (recorded) p.series->samples.push_back(value);
      }
    });
    cpp.note = fmt::format("{} epochs of {} steps; the last epoch's samples_per_sec", epochs, steps);
    py.note = cpp.note;
    append_series(common.results, cpp);
    append_series(common.results, py);
  });
}
