#include "cluster/remote_session.hpp"

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <utility>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "process/exit_watch.hpp"
#include "process/line_splitter.hpp"
#include "process/spawn.hpp"
#include "process/console_fold.hpp"
#include "process/worker_output.hpp"

namespace ddprun {

namespace asio = boost::asio;

namespace {

constexpr std::size_t kHeldLines = 20;

}  // namespace

std::string early_end_reason(int code, const std::deque<std::string>& stderr_lines,
                             const std::string& remote_ddprun) {
  const std::string last = stderr_lines.empty() ? std::string() : stderr_lines.back();
  const std::string detail = last.empty() ? std::string() : ": " + last;
  if (code == 255) return "cannot connect" + detail;
  if (code == 127) {
    return fmt::format("{} not found there (see --remote-ddprun){}", remote_ddprun, detail);
  }
  if (code == 126) return fmt::format("{} cannot be executed there{}", remote_ddprun, detail);
  // The staging script's failure, which says so (srun may print a line of its own after it);
  // the same code from the agent itself is its internal error.
  if (code == kStageFailedCode) {
    for (const auto& line : stderr_lines) {
      if (line.find("cannot stage ddprun") != std::string::npos) return "not staged: " + line;
    }
  }
  for (const auto& line : stderr_lines) {
    if (line.find(std::string(kSessionFlag)) != std::string::npos) {
      return fmt::format("{} there does not support --hosts (an older ddprun?){}", remote_ddprun,
                         detail);
    }
  }
  return fmt::format("ended with exit code {} before its checks{}", code, detail);
}

struct RemoteSession::State : std::enable_shared_from_this<RemoteSession::State> {
  State(asio::io_context& context, std::vector<std::string> a, std::string t, Handlers h,
        std::chrono::milliseconds s)
      : io(context), argv(std::move(a)), token(std::move(t)), handlers(std::move(h)), in(io),
        out(io), err(io), silence(s), silence_timer(io) {}

  asio::io_context& io;
  std::vector<std::string> argv;
  std::string token;
  Handlers handlers;
  asio::writable_pipe in;
  asio::readable_pipe out;
  asio::readable_pipe err;
  std::unique_ptr<ExitWatch> exit_watch;
  pid_t pid = -1;
  std::string hello;  // sent again to a remote command that staged ddprun
  // Shared: the binary goes to many hosts from one copy in memory.
  std::deque<std::shared_ptr<const std::string>> outbox;
  bool reported = false;  // a report came: the agent runs, staging is over
  std::vector<std::string> held_input;  // lines for the agent, until it reports
  int sends = 0;
  Clock::time_point stage_started;
  Staging staging;
  bool writing = false;
  bool input_closed = false;
  bool holding = true;
  std::deque<std::string> held;  // not yet printed
  std::deque<std::string> tail;  // the last lines, printed or not
  std::string unended;  // stdout: the start of a worker's line a report cut (--raw-output)
  int open_streams = 0;
  bool exited = false;
  bool ended = false;
  int code = 0;
  std::chrono::milliseconds silence;
  Clock::time_point heard;  // the remote shell's last output, either stream
  asio::steady_timer silence_timer;
  bool watching = false;  // the agent said it is alive: its silence counts from now on
  std::string lost;

  struct Stream {
    LineSplitter splitter{1 << 20};
    std::array<char, 65536> chunk;  // not zero-filled: 128 KiB per host adds up at 1024 hosts
  };
  Stream stdout_stream;
  Stream stderr_stream;

  void start(const std::string& first_line) {
    const auto exe = find_on_path(argv.at(0));
    if (exe.empty()) {
      throw Error(fmt::format("cannot start {}: not found on PATH", argv.at(0)));
    }
    // Its own process group, so that the terminal's Ctrl-C reaches only the command, which
    // forwards it in the session; and death with the command, which closes the connection,
    // which the remote agent notices.
    ChildPipe stdin_pipe;
    ChildPipe stdout_pipe;
    ChildPipe stderr_pipe;
    stdin_pipe.open();
    stdout_pipe.open();
    stderr_pipe.open();
    SpawnRequest request;
    request.path = exe;
    request.argv = argv;
    request.argv[0] = request.path;
    request.stdin_fd = stdin_pipe.read_end();
    request.stdout_fd = stdout_pipe.write_end();
    request.stderr_fd = stderr_pipe.write_end();
    try {
      pid = spawn_process(request);
    } catch (const SpawnError& e) {
      throw Error(fmt::format("cannot start {}: {}", argv.at(0), errno_message(e.error())));
    }
    in.assign(stdin_pipe.release_write());
    out.assign(stdout_pipe.release_read());
    err.assign(stderr_pipe.release_read());
    open_streams = 2;
    hello = first_line;
    send(hello);
    read(out, stdout_stream, false);
    read(err, stderr_stream, true);
    exit_watch = std::make_unique<ExitWatch>(
        io, pid, [self = shared_from_this()](boost::system::error_code ec, int status) {
          if (ec == asio::error::operation_aborted) return;
          self->exited = true;
          self->code =
              ec ? 255 : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
          self->silence_timer.cancel();
          self->maybe_end();
        });
  }

  void read(asio::readable_pipe& pipe, Stream& stream, bool is_err) {
    pipe.async_read_some(asio::buffer(stream.chunk), [self = shared_from_this(), &pipe, &stream,
                                                      is_err](boost::system::error_code ec,
                                                              std::size_t n) {
      if (ec) {
        self->deliver(stream.splitter.finish(), is_err);
        if (!is_err && !self->unended.empty()) {
          // The worker's open line never went on: it ends with the stream.
          write_all(STDOUT_FILENO, std::exchange(self->unended, {}) + "\n");
        }
        --self->open_streams;
        self->maybe_end();
        return;
      }
      self->deliver(stream.splitter.feed(std::string_view(stream.chunk.data(), n)), is_err);
      // Heard once delivered: the time this thread spent writing to a slow console is not the
      // host's silence.
      self->heard = Clock::now();
      self->read(pipe, stream, is_err);
    });
  }

  // The remote agent already turned its workers' redraws into lines; a '\r' of the remote
  // shell's own is shown as a line end too.
  void deliver(const std::vector<SplitLine>& pieces, bool is_err) {
    std::string batch;
    for (const auto& piece : pieces) {
      std::string joined;
      if (!is_err && !unended.empty() && report_begins_at(piece.text) != 0) {
        joined = std::exchange(unended, {}) + piece.text;
      }
      const std::string& line = joined.empty() ? piece.text : joined;
      if (!is_err) {
        if (const auto at = report_begins_at(line); at != std::string::npos && at > 0) {
          // A worker's line still open when the agent wrote a whole report line (--raw-output:
          // the workers share the agent's stdout): it goes on after the report.
          unended += line.substr(0, at);
          write_all(STDOUT_FILENO, batch);
          batch.clear();
          deliver({SplitLine{line.substr(at)}}, false);
          continue;
        }
        if (auto report = decode_report(token, line)) {
          write_all(STDOUT_FILENO, batch);
          batch.clear();
          if (!reported) {
            reported = true;
            for (const auto& held_line : held_input) send(held_line);
            held_input.clear();
          }
          if (report->kind == Report::Kind::kAlive) {
            if (!watching) {
              watching = true;
              watch_silence();
            }
            continue;
          }
          if (handlers.on_report) handlers.on_report(*report);
          continue;
        }
        if (!reported && stage_request(line)) continue;
      }
      if (is_err) {
        // A worker's line tagged for folding is kept as the console would show it.
        const auto tagged = untag_console_line(line);
        tail.push_back(tagged ? std::string(tagged->prefix) + std::string(tagged->text) : line);
        if (tail.size() > kHeldLines) tail.pop_front();
        if (holding) {
          held.push_back(line);
          if (held.size() > kHeldLines) held.pop_front();
          continue;
        }
      }
      if (handlers.console && handlers.console(is_err, line, batch)) continue;
      batch += line;
      batch += '\n';
    }
    write_all(is_err ? STDERR_FILENO : STDOUT_FILENO, batch);
  }

  // The staging script's lines (cluster/staging.hpp), before the agent runs; true when `line`
  // was one.
  bool stage_request(const std::string& line) {
    if (!handlers.binary) return false;
    if (line == kStageCached) {
      staging.cached = true;
    } else if (line == kStageSend || line == kStageSendBytes) {
      // One per cache directory the script tries (and one more where sbcast's file was gone);
      // more would be a confused remote, which would otherwise wait until the connect timeout.
      if (++sends > 4) {
        close_input();
        return true;
      }
      if (sends == 1) stage_started = Clock::now();
      if (input_closed) return true;
      const bool bytes = line == kStageSendBytes;
      handlers.binary([self = shared_from_this(), bytes](std::shared_ptr<const StagedBinary> binary,
                                                         const std::string& why_not) {
        if (bytes && binary && !binary->file_on_hosts.empty()) {
          auto on_session = std::make_shared<StagedBinary>(*binary);
          on_session->file_on_hosts.clear();
          binary = std::move(on_session);
        }
        self->answer(binary, why_not);
      });
    } else if (line == kStageHello && sends > 0) {
      staging.sent = true;
      staging.seconds = std::chrono::duration<double>(Clock::now() - stage_started).count();
      send(hello);
    } else {
      return false;
    }
    return true;
  }

  void answer(const std::shared_ptr<const StagedBinary>& binary, const std::string& why_not) {
    if (input_closed) return;
    if (!binary) {
      // Without an answer the script would wait for the bytes: its input ends instead, and
      // this line is the reason its host gives.
      tail.push_back(fmt::format("cannot send this ddprun: {}", why_not));
      close_input();
      return;
    }
    send(binary->header(), false);
    staging.broadcast = !binary->file_on_hosts.empty();  // the last answer is the one used
    if (!staging.broadcast) {
      outbox.push_back(binary->bytes);
      flush();
    }
  }

  // Checks as often as the agent speaks: a remote shell silent for `silence` is ended, which
  // ends this session as the shell's own end would.
  void watch_silence() {
    silence_timer.expires_after(keep_alive_every(silence));
    silence_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->exited) return;
      // Output this process has not read yet (its own thread was busy writing to a slow
      // console) was still heard.
      if (self->unread(self->out) || self->unread(self->err)) self->heard = Clock::now();
      const auto quiet = Clock::now() - self->heard;
      if (quiet < self->silence) {
        self->watch_silence();
        return;
      }
      self->lost = fmt::format("heard nothing from its agent for {} (it says it is alive every "
                               "{})",
                               format_duration(quiet),
                               format_duration(keep_alive_every(self->silence)));
      if (self->pid > 0) ::kill(-self->pid, SIGKILL);
    });
  }

  static bool unread(asio::readable_pipe& pipe) {
    int bytes = 0;
    return pipe.is_open() && ::ioctl(pipe.native_handle(), FIONREAD, &bytes) == 0 && bytes > 0;
  }

  void maybe_end() {
    if (ended || !exited || open_streams > 0) return;
    ended = true;
    if (handlers.on_ended) handlers.on_ended(code);
  }

  void send(const std::string& line, bool newline = true) {
    if (input_closed) return;
    outbox.push_back(std::make_shared<const std::string>(newline ? line + "\n" : line));
    flush();
  }

  void flush() {
    if (writing || outbox.empty() || !in.is_open()) return;
    writing = true;
    asio::async_write(in, asio::buffer(*outbox.front()),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        self->writing = false;
                        if (ec) {  // the remote shell is gone; its end is reported by the wait
                          self->outbox.clear();
                          return;
                        }
                        self->outbox.pop_front();
                        if (self->outbox.empty() && self->input_closed) {
                          self->in.close();
                          return;
                        }
                        self->flush();
                      });
  }

  void close_input() {
    if (input_closed) return;
    input_closed = true;
    if (!writing && outbox.empty()) {
      boost::system::error_code ignored;
      in.close(ignored);
    }
  }

  void release() {
    holding = false;
    std::string batch;
    for (const auto& line : held) batch += line + "\n";
    held.clear();
    write_all(STDERR_FILENO, batch);
  }
};

RemoteSession::RemoteSession(asio::io_context& io, std::vector<std::string> argv,
                             std::string token, Handlers handlers,
                             std::chrono::milliseconds silence)
    : state_(std::make_shared<State>(io, std::move(argv), std::move(token), std::move(handlers),
                                     silence)) {}

RemoteSession::~RemoteSession() {
  if (state_->pid > 0 && !state_->exited) ::kill(-state_->pid, SIGKILL);
  // The pending operations hold the state; they complete (aborted) when the io_context ends.
  state_->handlers = {};
}

void RemoteSession::start(const std::string& hello) { state_->start(hello); }
void RemoteSession::send(const std::string& line) {
  if (!state_->reported) {
    state_->held_input.push_back(line);
    return;
  }
  state_->send(line);
}
void RemoteSession::close_input() { state_->close_input(); }
void RemoteSession::kill() {
  if (state_->pid > 0 && !state_->exited) ::kill(-state_->pid, SIGKILL);
}
void RemoteSession::release_stderr() { state_->release(); }
const std::deque<std::string>& RemoteSession::stderr_tail() const { return state_->tail; }
const std::string& RemoteSession::lost() const { return state_->lost; }
int RemoteSession::pid() const { return state_->pid; }
const RemoteSession::Staging& RemoteSession::staging() const { return state_->staging; }

nlohmann::json RemoteSession::Staging::to_json() const {
  if (sent) return {{"staging", "sent"}, {"staged_seconds", seconds}, {"broadcast", broadcast}};
  if (cached) return {{"staging", "cached"}};
  return nlohmann::json::object();
}

}  // namespace ddprun
