#include "etcd/etcd_store.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/random.hpp"

namespace ddprun {

using json = nlohmann::json;

namespace {

// etcd's default --max-txn-ops.
constexpr std::size_t kMaxTxnOps = 128;

json put_op(const std::string& key, const std::string& value) {
  return json{{"request_put", put_request(key, value)}};
}

json range_op(const std::string& key) { return json{{"request_range", key_only(key)}}; }

// "no such key" over `range` (a key, or a prefix_range: a compare over a range holds for every
// key in it, and for none when the range is empty): its create revision is 0.
json absent(json range) {
  range["target"] = "CREATE";
  range["result"] = "EQUAL";
  range["create_revision"] = "0";
  return range;
}

json unchanged_since(const std::string& key, std::int64_t mod_revision) {
  return json{{"key", base64_encode(key)}, {"target", "MOD"}, {"result", "EQUAL"},
              {"mod_revision", std::to_string(mod_revision)}};
}

json value_is(const std::string& key, const std::string& value) {
  return json{{"key", base64_encode(key)}, {"target", "VALUE"}, {"result", "EQUAL"},
              {"value", base64_encode(value)}};
}

// The first key-value of a range answer (plain, or inside a transaction's response_range).
std::optional<EtcdKv> first_kv(const json& range) {
  auto it = range.find("kvs");
  if (it == range.end() || it->empty()) return std::nullopt;
  return parse_kv(it->at(0));
}

}  // namespace

std::string EtcdStoreOptions::run_prefix() const {
  std::string p = prefix;
  while (!p.empty() && p.back() == '/') p.pop_back();
  return fmt::format("{}/{}/", p, run_id);
}

EtcdStore::EtcdStore(EtcdStoreOptions options, Deadline deadline)
    : options_(std::move(options)), run_prefix_(options_.run_prefix()), client_(options_.endpoints) {
  ping(deadline);
}

EtcdStore::~EtcdStore() = default;

void EtcdStore::put(const std::string& key, const std::string& value, std::int64_t lease,
                    Deadline deadline) {
  client_.call("/v3/kv/put", put_request(full_key(key), value, lease), deadline);
}

void EtcdStore::set(const std::string& key, const std::string& value, Deadline deadline) {
  put(key, value, 0, deadline);
}

EtcdStore::Read EtcdStore::read(const std::string& key, Deadline deadline) {
  auto answer = client_.call("/v3/kv/range", key_only(full_key(key)), deadline);
  return Read{first_kv(answer), json_int(answer.at("header"), "revision")};
}

std::optional<std::string> EtcdStore::try_get(const std::string& key, Deadline deadline) {
  auto r = read(key, deadline);
  if (!r.kv) return std::nullopt;
  return r.kv->value;
}

std::optional<std::string> EtcdStore::get_mirrored(const std::string& key, Deadline deadline) {
  const auto full = full_key(key);
  if (!options_.mirror || !options_.mirror->covers(full)) return std::nullopt;
  // The last part of the wait (up to 2 s) is this store's own read and watch: a key the copy
  // missed (its watch broken, etcd unreachable from it) is still found, and a wait that fails
  // says why in this store's words.
  const auto started = Clock::now();
  const auto own = std::min<Clock::duration>(deadline.remaining() / 2, std::chrono::seconds(2));
  auto value = options_.mirror->wait(full, Deadline::at(deadline.when() - own), interrupted_);
  if (interrupted_) throw InterruptedError(fmt::format("{}: interrupted", describe()));
  if (!value && !deadline.expired()) {
    spdlog::debug("{}: key '{}' not in the copy after {}; reading it ({})", describe(), key,
                  format_duration(Clock::now() - started),
                  options_.mirror->state());
  }
  return value;
}

std::string EtcdStore::get(const std::string& key, Deadline deadline) {
  const auto started = Clock::now();
  if (auto mirrored = get_mirrored(key, deadline)) return *mirrored;
  while (true) {
    auto r = read(key, deadline);
    if (r.kv) return r.kv->value;
    std::string value;
    try {
      client_.watch(full_key(key), r.revision + 1, deadline, [&](const EtcdEvent& event) {
        if (event.deleted) return false;
        value = event.kv.value;
        return true;
      });
    } catch (const EtcdError& e) {
      // A watch whose stream broke resumes on another member from the revision after its read;
      // when etcd has compacted that history away, the key is read again as it is now.
      if (e.code() == kEtcdCompacted) continue;
      throw;
    } catch (const EtcdUnavailable& e) {
      throw EtcdUnavailable(fmt::format("waiting for key '{}' for {}: {}", key,
                                        format_duration(Clock::now() - started), e.what()));
    } catch (const TimeoutError&) {
      throw TimeoutError(fmt::format("etcd {}: key '{}' did not appear within {}", describe(),
                                     key, format_duration(Clock::now() - started)));
    }
    return value;
  }
}

bool EtcdStore::check(const std::vector<std::string>& keys, Deadline deadline) {
  for (const auto& key : keys) {
    if (!read(key, deadline).kv) return false;
  }
  return true;
}

std::string EtcdStore::counter_prefix(const std::string& key) const {
  return full_key(key) + kCounterDir;
}

std::int64_t EtcdStore::add(const std::string& key, std::int64_t delta, Deadline deadline) {
  if (delta < 0) {
    throw ProtocolError(fmt::format("etcd store: add({}, {}): counters only grow here", key,
                                    delta));
  }
  const auto counter = full_key(key);
  if (delta == 0) {
    auto r = read(key, deadline);
    return r.kv ? r.kv->version : 0;
  }
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < delta; ++i) {
    // The counter is the key's version; each increment also puts a key of its own, named at
    // random, in the same transaction, which only runs while that key does not exist. A try
    // sent again after a lost answer therefore finds its key instead of counting twice.
    const auto mine = counter_prefix(key) + random_hex(16);  // an increment's own key
    auto counter_put = put_request(counter, "");
    counter_put["prev_kv"] = true;
    const json put_counter{{"request_put", counter_put}};
    json txn{{"compare", {absent(key_only(mine))}},
             {"success", {put_counter, put_op(mine, "")}},
             {"failure", {range_op(mine)}}};
    auto answer = client_.call("/v3/kv/txn", txn, deadline);
    const auto& first = answer.at("responses").at(0);
    if (answer.value("succeeded", false)) {
      const auto& put = first.at("response_put");
      count = (put.contains("prev_kv") ? json_int(put["prev_kv"], "version") : 0) + 1;
      continue;
    }
    // An earlier try was applied: the counter's version as of that try's revision.
    auto applied = first_kv(first.at("response_range"));
    if (!applied) throw ProtocolError(fmt::format("etcd store: add({}): increment lost", key));
    json then{{"key", base64_encode(counter)},
              {"revision", std::to_string(applied->create_revision)}};
    auto kv = first_kv(client_.call("/v3/kv/range", then, deadline));
    count = kv ? kv->version : 0;
  }
  return count;
}

std::string EtcdStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired, Deadline deadline) {
  const auto full = full_key(key);
  // A missing key equals "" (as in the TCP store).
  json txn{{"compare", {expected.empty() ? absent(key_only(full)) : value_is(full, expected)}},
           {"success", {put_op(full, desired)}},
           {"failure", {range_op(full)}}};
  auto answer = client_.call("/v3/kv/txn", txn, deadline);
  if (answer.value("succeeded", false)) return desired;
  auto kv = first_kv(answer.at("responses").at(0).at("response_range"));
  if (!kv) return std::string();
  if (expected.empty() && kv->value.empty()) {
    // Present but empty equals "" too: compare on its revision instead.
    json retry{{"compare", {unchanged_since(full, kv->mod_revision)}},
               {"success", {put_op(full, desired)}},
               {"failure", {range_op(full)}}};
    answer = client_.call("/v3/kv/txn", retry, deadline);
    if (answer.value("succeeded", false)) return desired;
    kv = first_kv(answer.at("responses").at(0).at("response_range"));
    return kv ? kv->value : std::string();
  }
  return kv->value;
}

bool EtcdStore::erase(const std::string& key, Deadline deadline) {
  const auto prefix = counter_prefix(key);
  json both{{"success",
             {{{"request_delete_range", key_only(full_key(key))}},
              {{"request_delete_range", prefix_range(prefix)}}}}};
  auto answer = client_.call("/v3/kv/txn", both, deadline);
  const auto& responses = answer.at("responses");
  return json_int(responses.at(0).at("response_delete_range"), "deleted") +
             json_int(responses.at(1).at("response_delete_range"), "deleted") >
         0;
}

std::vector<std::string> EtcdStore::multi_get(const std::vector<std::string>& keys,
                                              Deadline deadline) {
  std::vector<std::optional<std::string>> found(keys.size());
  for (std::size_t begin = 0; begin < keys.size(); begin += kMaxTxnOps) {
    const std::size_t end = std::min(keys.size(), begin + kMaxTxnOps);
    json reads = json::array();
    for (std::size_t i = begin; i < end; ++i) reads.push_back(range_op(full_key(keys[i])));
    auto answer = client_.call("/v3/kv/txn", {{"success", reads}}, deadline);
    const auto& responses = answer.at("responses");
    for (std::size_t i = begin; i < end; ++i) {
      if (auto kv = first_kv(responses.at(i - begin).at("response_range"))) found[i] = kv->value;
    }
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    values.push_back(found[i] ? std::move(*found[i]) : get(keys[i], deadline));
  }
  return values;
}

void EtcdStore::multi_set(const std::vector<std::string>& keys,
                          const std::vector<std::string>& values, Deadline deadline) {
  if (keys.size() != values.size()) {
    throw ProtocolError(fmt::format("multi_set: {} keys but {} values", keys.size(),
                                    values.size()));
  }
  for (std::size_t begin = 0; begin < keys.size(); begin += kMaxTxnOps) {
    const std::size_t end = std::min(keys.size(), begin + kMaxTxnOps);
    json puts = json::array();
    for (std::size_t i = begin; i < end; ++i) puts.push_back(put_op(full_key(keys[i]), values[i]));
    client_.call("/v3/kv/txn", {{"success", puts}}, deadline);
  }
}

void EtcdStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (const auto& key : keys) get(key, deadline);
}

std::int64_t EtcdStore::num_keys(Deadline deadline) { return count_prefix("", deadline); }

std::int64_t EtcdStore::count_prefix(const std::string& key_prefix, Deadline deadline) {
  auto request = prefix_range(full_key(key_prefix));
  request["count_only"] = true;
  return json_int(client_.call("/v3/kv/range", request, deadline), "count");
}

std::int64_t EtcdStore::erase_run(Deadline deadline) {
  return json_int(client_.call("/v3/kv/deleterange", prefix_range(run_prefix_), deadline),
                  "deleted");
}

std::optional<std::int64_t> EtcdStore::erase_run_unless(const std::string& key_prefix,
                                                        Deadline deadline) {
  const json none = absent(prefix_range(full_key(key_prefix)));
  const json erase{{"request_delete_range", prefix_range(run_prefix_)}};
  auto answer = client_.call("/v3/kv/txn", {{"compare", {none}}, {"success", {erase}}}, deadline);
  if (!answer.value("succeeded", false)) return std::nullopt;
  return json_int(answer.at("responses").at(0).at("response_delete_range"), "deleted");
}

void EtcdStore::ping(Deadline deadline) { client_.call("/v3/maintenance/status", json::object(), deadline); }

std::string EtcdStore::describe() const {
  return fmt::format("etcd {} under {}", client_.describe(), run_prefix_);
}

void EtcdStore::interrupt() {
  interrupted_ = true;
  client_.interrupt();
  if (options_.mirror) options_.mirror->wake();
}

}  // namespace ddprun
