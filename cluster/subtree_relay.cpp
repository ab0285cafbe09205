#include "cluster/subtree_relay.hpp"

#include <signal.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio.hpp>
#include <fmt/format.h>

#include "cluster/remote_session.hpp"
#include "cluster/tree.hpp"
#include "common/error.hpp"

namespace ddprun {

namespace asio = boost::asio;

struct SubtreeRelay::Impl {
  Impl(const SessionHello& h, HeadLink& l)
      : hello(h), link(l), entries(tree_from_json(h.subtree)), work(asio::make_work_guard(io)) {
    for (std::size_t i = 0; i < entries.size(); ++i) {
      sessions.push_back(std::make_unique<RemoteSession>(
          io, entries[i].argv, hello.token,
          RemoteSession::Handlers{[this, i](const Report& r) { on_report(i, r); },
                                  [this, i](int code) { on_ended(i, code); },
                                  [this](const RemoteSession::BinaryReady& ready) {
                                    try {
                                      ready(own_binary(), "");
                                    } catch (const Error& e) {
                                      ready(nullptr, e.what());
                                    }
                                  },
                                  // Lines pass up as they are: the command folds them.
                                  nullptr},
          hello.hangup_timeout));
    }
    answered.assign(entries.size(), false);
    running = entries.size();
    // Every signal blocked in the new thread (it inherits the mask): the agent's own signal
    // thread must be the one that receives them.
    sigset_t all;
    sigset_t old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    thread = std::thread([this] { io.run(); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    asio::post(io, [this] { start_all(); });
  }

  ~Impl() {
    asio::post(io, [this] {
      for (auto& s : sessions) s->kill();
    });
    work.reset();
    // The killed sessions end at once; the io_context runs out of work when they have.
    thread.join();
  }

  SessionHello hello;
  HeadLink& link;
  std::vector<TreeEntry> entries;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::vector<std::unique_ptr<RemoteSession>> sessions;
  std::vector<bool> answered;  // the entry's own host said ready or refused
  std::set<int> ended_nodes;   // "ended" already sent up for these
  std::thread thread;
  std::mutex mutex;
  std::condition_variable cv;
  std::size_t running = 0;  // sessions whose remote shell has not exited
  std::shared_ptr<const StagedBinary> binary;  // on the io thread only

  void start_all() {
    for (std::size_t i = 0; i < entries.size(); ++i) {
      SessionHello child = hello;
      child.host = entries[i].host;
      child.node = entries[i].node;
      child.subtree = tree_to_json(entries[i].subtree);
      child.args = entries[i].args;
      try {
        sessions[i]->start(encode_hello(child));
      } catch (const Error& e) {
        link.report({Report::Kind::kRefused, {{"node", entries[i].node}, {"reason", e.what()}}}, hello.token);
        on_ended(i, 255);
      }
    }
  }

  // This relay's own executable, read on the first host's request: it sends the subtree
  // what it runs itself, so the command sends the binary at most once per relay.
  std::shared_ptr<const StagedBinary> own_binary() {
    if (!binary) binary = read_own_binary();
    return binary;
  }

  void on_report(std::size_t i, Report report) {
    if (report.body.value("node", -1) == entries[i].node &&
        (report.kind == Report::Kind::kReady || report.kind == Report::Kind::kRefused)) {
      answered[i] = true;
      if (report.kind == Report::Kind::kReady) {
        report.body.update(sessions[i]->staging().to_json());
        if (sessions[i]->staging().sent) report.body["staged_by"] = hello.host;
      }
    }
    if (report.kind == Report::Kind::kEnded) ended_nodes.insert(report.body.value("node", -1));
    link.report(report, hello.token);
  }

  void send_ended(int node, int code, const std::vector<std::string>& tail,
                  const std::string& lost) {
    if (!ended_nodes.insert(node).second) return;
    link.report({Report::Kind::kEnded, {{"node", node}, {"code", code}, {"stderr_tail", tail}, {"lost", lost}}},
                hello.token);
  }

  void lose(const TreeEntry& relay, const std::string& why) {
    for_each_below(relay, [&](const TreeEntry& host) { send_ended(host.node, 255, {}, why); });
  }

  void on_ended(std::size_t i, int code) {
    const auto& tail = sessions[i]->stderr_tail();
    std::vector<std::string> lines(tail.begin(), tail.end());
    const bool was_ready = answered[i];
    if (!answered[i]) {
      answered[i] = true;
      link.report({Report::Kind::kRefused,
                   {{"node", entries[i].node},
                    {"reason", fmt::format("{} (started by {})",
                                           early_end_reason(code, tail, hello.remote_ddprun),
                                           hello.host)}}},
                  hello.token);
    }
    const auto& lost = sessions[i]->lost();
    send_ended(entries[i].node, code, lines,
               lost.empty() ? lost : fmt::format("{} (its relay {} ended it)", lost, hello.host));
    lose(entries[i], was_ready ? fmt::format("lost with the connection from {} to {} (node {})",
                                             hello.host, entries[i].host, entries[i].node)
                               : fmt::format("not reached: {} (node {}), which starts it, failed",
                                             entries[i].host, entries[i].node));
    std::lock_guard lock(mutex);
    --running;
    cv.notify_all();
  }
};

SubtreeRelay::SubtreeRelay(const SessionHello& hello, HeadLink& link)
    : impl_(std::make_unique<Impl>(hello, link)) {}

SubtreeRelay::~SubtreeRelay() = default;

void SubtreeRelay::send_all(const std::string& line) {
  asio::post(impl_->io, [impl = impl_.get(), line] {
    // After "go" no host asks for ddprun: the relay's copy in memory is not needed any more (a
    // session still writing it holds a reference of its own).
    if (line == "go") impl->binary.reset();
    for (auto& s : impl->sessions) {
      if (line == "go") s->release_stderr();
      s->send(line);
    }
  });
}

void SubtreeRelay::close_all() {
  asio::post(impl_->io, [impl = impl_.get()] {
    for (auto& s : impl->sessions) s->close_input();
  });
}

bool SubtreeRelay::wait_all_ended(Deadline deadline) {
  std::unique_lock lock(impl_->mutex);
  return impl_->cv.wait_until(lock, deadline.when(), [this] { return impl_->running == 0; });
}

}  // namespace ddprun
