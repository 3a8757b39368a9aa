// One model over several processes (see distributed.h).
//
// Control: rank 0 broadcasts a Command for every call that changes a cache
// (make, truncate, free, Forward, ForwardBatch); the others run the same call
// on their mirror caches, so every rank's caches hold the same tokens and the
// same per-layer state layout, and each rank's Forward runs its own layers in
// step with the others (its RunMain blocks on the previous stage's streams).
// Every check a Forward makes is made alike on every rank (the same caches,
// the same tokens) except the logits buffer's size, which only rank 0 has:
// that one is checked here before anything is broadcast.
#include "engine/distributed.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/log.h"
#include "dist/communicator.h"

namespace dsv4 {
namespace {

using dist::Communicator;

constexpr int kTagActivation = 1;

// Broadcast by rank 0 before each mirrored call: an op, its arguments and up
// to kInline token ids (a decode step needs no second broadcast).
enum class Op : int64_t {
  kStop = 0,
  kNewCache,      // a = id, b = max_tokens
  kFreeCache,     // a = id
  kTruncate,      // a = id, b = n
  kForward,       // a = id, b = T, c = all_logits; tokens inline or next
  kForwardBatch,  // a = entries, b = tokens; then [entries, 3] (id, T, all_logits), tokens
  kTraffic,       // every rank's dist::Traffic gathered to rank 0
};
constexpr int kInline = 8;
struct Command {
  Op op = Op::kStop;
  int64_t a = 0, b = 0, c = 0;
  int32_t tokens[kInline] = {};
};
static_assert(sizeof(Command) == 64);

// A transport failure inside a forward: the layers already run cannot be
// undone and the other ranks wait on this one, so the job ends here.
[[noreturn]] void Fatal(Communicator& comm, const Status& st) {
  const std::string who = "rank " + std::to_string(comm.rank());
  // The transport's errors name the rank already ("rank 0 waited ...").
  const bool named = st.message().starts_with(who + " ") || st.message().starts_with(who + ":");
  std::fprintf(stderr, "dsv4: error: %s%s\n", named ? "" : (who + ": ").c_str(),
               st.message().c_str());
  if (!st.hint().empty()) std::fprintf(stderr, "dsv4: hint: %s\n", st.hint().c_str());
  std::fflush(stderr);
  comm.Abort(2);
  std::abort();  // not reached: Abort ends the process (a virtual call's [[noreturn]] is not seen)
}

// The ring of stages: stage s receives from s − 1 and sends to s + 1, the
// last stage back to stage 0. A stage is `group` consecutive ranks (more than
// one with --parallel pipeline,expert: they split its experts and all hold
// its streams); rank i of a stage sends to rank i of the next, and only rank
// 0 takes the end (the last stage's other ranks send nothing back). `first`:
// each stage's first layer, then the layer count ([stages + 1]; set once the
// split is known), to name the data in an error.
class RingLink final : public PipelineLink {
 public:
  RingLink(std::shared_ptr<Communicator> comm, int group)
      : comm_(std::move(comm)), group_(std::max(group, 1)) {}
  void set_split(std::vector<int64_t> first) { first_ = std::move(first); }
  // A copy goes out (the caller reuses `data` at once); Flush waits for them.
  void SendNext(std::span<const float> data, std::string_view what) override {
    const int to = (comm_->rank() + group_) % comm_->size();
    if (to < group_ && to != 0) return;  // the end goes to rank 0 alone
    if (used_ == sent_.size()) sent_.emplace_back();
    std::vector<float>& copy = sent_[used_++];
    copy.assign(data.begin(), data.end());
    if (Status st = comm_->StartSend(to, kTagActivation, dist::Bytes(std::span<const float>(copy)),
                                     Name(what, comm_->rank()));
        !st.ok()) {
      Fatal(*comm_, st);
    }
  }
  void Flush() override {
    if (Status st = comm_->WaitSent(); !st.ok()) Fatal(*comm_, st);
    used_ = 0;
  }
  void RecvPrev(std::span<float> data, std::string_view what) override {
    const int from = (comm_->rank() + comm_->size() - group_) % comm_->size();
    if (Status st = comm_->Recv(from, kTagActivation, dist::MutableBytes(data), Name(what, from));
        !st.ok()) {
      Fatal(*comm_, st);
    }
  }

 private:
  // "residual streams after layers [4, 8)": the output of `rank`'s stage.
  std::string Name(std::string_view what, int rank) const {
    std::string s(what);
    const int stage = rank / group_;
    if (stage + 1 < static_cast<int>(first_.size())) {
      s += " after layers [" + std::to_string(first_[stage]) + ", " +
           std::to_string(first_[stage + 1]) + ")";
    }
    return s;
  }
  std::shared_ptr<Communicator> comm_;
  int group_;
  std::vector<int64_t> first_;
  std::vector<std::vector<float>> sent_;  // the copies in flight (the first used_), reused
  size_t used_ = 0;
};

class FrontCache;

// Expert parallel: the routed experts' output rows, all-gathered among
// `comm`'s ranks (a stage's, with pipeline,expert); errors end the job from
// `world`.
class GatherLink final : public ExpertLink {
 public:
  GatherLink(std::shared_ptr<Communicator> comm, std::shared_ptr<Communicator> world)
      : comm_(std::move(comm)), world_(std::move(world)) {}
  void AllGather(std::span<float> data, std::span<const int64_t> offsets, int64_t layer) override {
    bytes_.resize(offsets.size());
    for (size_t r = 0; r < offsets.size(); ++r) bytes_[r] = offsets[r] * int64_t{sizeof(float)};
    if (Status st = comm_->AllGather(dist::MutableBytes(data), bytes_,
                                     "routed expert outputs of layer " + std::to_string(layer));
        !st.ok()) {
      Fatal(*world_, st);
    }
  }

 private:
  std::shared_ptr<Communicator> comm_, world_;
  std::vector<int64_t> bytes_;  // offsets in bytes, reused
};

// What rank 0's model and its caches share: the inner model, the
// communicator, and whether the workers have been stopped (a cache that
// outlives the model then tells no one).
struct Front {
  std::shared_ptr<Communicator> comm;
  std::unique_ptr<RingLink> link;
  std::unique_ptr<GatherLink> gather;
  std::unique_ptr<Model> model;
  int64_t next_id = 1;
  bool stopped = false;
  // The live caches rank 0 made, by address (a cache handed in is looked up
  // here: one of another model is refused).
  std::unordered_map<const SequenceCache*, FrontCache*> caches;
  std::mutex mu;  // serialises the broadcasts (caches may be freed on other threads)

  void Send(const Command& cmd) {
    Command c = cmd;
    if (Status st = comm->Broadcast({reinterpret_cast<std::byte*>(&c), sizeof(c)},
                                    /*patient=*/false, "the next command");
        !st.ok()) {
      Fatal(*comm, st);
    }
  }
  void SendTokens(std::span<const int32_t> tokens) {
    // Broadcast's buffer is in-out; on rank 0 it is only read.
    const std::span<int32_t> data(const_cast<int32_t*>(tokens.data()), tokens.size());
    if (Status st = comm->Broadcast(dist::MutableBytes(data), /*patient=*/false, "token ids");
        !st.ok()) {
      Fatal(*comm, st);
    }
  }
};

// Every rank's traffic, less `meta` (what these reports have cost so far,
// updated), into rank 0's `all` [size].
Status GatherTraffic(Communicator& comm, dist::Traffic& meta, std::span<dist::Traffic> all) {
  const dist::Traffic before = comm.traffic();
  const dist::Traffic mine{.bytes = before.bytes - meta.bytes,
                           .messages = before.messages - meta.messages};
  RETURN_IF_ERROR(comm.Gather(dist::Bytes(std::span<const dist::Traffic>(&mine, 1)),
                              dist::MutableBytes(all), "traffic counts"));
  meta.bytes += comm.traffic().bytes - before.bytes;
  meta.messages += comm.traffic().messages - before.messages;
  return Status::Ok();
}

// Rank 0's cache: the inner model's, mirrored on every other rank.
class FrontCache final : public SequenceCache {
 public:
  FrontCache(std::shared_ptr<Front> front, int64_t id, std::unique_ptr<SequenceCache> inner)
      : front_(std::move(front)), id_(id), inner_(std::move(inner)) {}
  ~FrontCache() override {
    std::lock_guard<std::mutex> lock(front_->mu);
    front_->caches.erase(this);
    if (!front_->stopped) front_->Send(Command{.op = Op::kFreeCache, .a = id_});
  }
  int64_t length() const override { return inner_->length(); }
  void Truncate(int64_t n) override {
    std::lock_guard<std::mutex> lock(front_->mu);
    if (!front_->stopped) front_->Send(Command{.op = Op::kTruncate, .a = id_, .b = n});
    inner_->Truncate(n);
  }
  bool ExactTruncate() const override { return inner_->ExactTruncate(); }
  int64_t KeepablePrefix(int64_t n) const override { return inner_->KeepablePrefix(n); }
  // SaveState / LoadState: not offered (the defaults refuse): the state is
  // spread over the ranks.
  int64_t id() const { return id_; }
  SequenceCache& inner() { return *inner_; }
  const SequenceCache& inner() const { return *inner_; }

 private:
  std::shared_ptr<Front> front_;
  int64_t id_;
  std::unique_ptr<SequenceCache> inner_;
};

// Rank 0's model: the inner model (the first stage and the head), each call
// that changes a cache broadcast first.
class FrontModel final : public Model {
 public:
  explicit FrontModel(std::shared_ptr<Front> front) : front_(std::move(front)) {}
  ~FrontModel() override {
    std::lock_guard<std::mutex> lock(front_->mu);
    front_->Send(Command{.op = Op::kStop});
    front_->stopped = true;
  }
  const ModelInfo& info() const override { return inner().info(); }
  std::unique_ptr<SequenceCache> NewCache(int64_t max_tokens) const override {
    std::lock_guard<std::mutex> lock(front_->mu);
    const int64_t id = front_->next_id++;
    front_->Send(Command{.op = Op::kNewCache, .a = id, .b = max_tokens});
    auto cache = std::make_unique<FrontCache>(front_, id, inner().NewCache(max_tokens));
    front_->caches[cache.get()] = cache.get();
    return cache;
  }
  Status Forward(std::span<const int32_t> tokens, SequenceCache& cache, std::span<float> logits,
                 bool all_logits) override {
    std::lock_guard<std::mutex> lock(front_->mu);
    FrontCache* fc = Find(&cache);
    if (fc == nullptr) {
      return InvalidArgument("Forward: the cache was not made by this model's NewCache");
    }
    const int64_t T = static_cast<int64_t>(tokens.size()), V = info().vocab_size;
    if (T > 0 && static_cast<int64_t>(logits.size()) < (all_logits ? T : 1) * V) {
      return InvalidArgument("Forward: logits buffer has " + std::to_string(logits.size()) +
                             " floats, needs " + std::to_string((all_logits ? T : 1) * V));
    }
    Command cmd{.op = Op::kForward, .a = fc->id(), .b = T, .c = all_logits};
    if (T <= kInline) std::copy(tokens.begin(), tokens.end(), cmd.tokens);
    front_->Send(cmd);
    if (T > kInline) front_->SendTokens(tokens);
    return inner().Forward(tokens, fc->inner(), logits, all_logits);
  }
  Status ForwardBatch(std::span<const BatchEntry> entries) override {
    const int64_t V = info().vocab_size;
    std::lock_guard<std::mutex> lock(front_->mu);
    table_.clear();
    tokens_.clear();
    inner_entries_.clear();
    for (size_t i = 0; i < entries.size(); ++i) {
      const BatchEntry& e = entries[i];
      FrontCache* fc = Find(e.cache);
      const int64_t T = static_cast<int64_t>(e.tokens.size());
      if (fc == nullptr) {
        return InvalidArgument("ForwardBatch entry " + std::to_string(i) +
                               ": the cache was not made by this model's NewCache");
      }
      if (T > 0 && static_cast<int64_t>(e.logits.size()) < (e.all_logits ? T : 1) * V) {
        return InvalidArgument("ForwardBatch entry " + std::to_string(i) + ": logits buffer has " +
                               std::to_string(e.logits.size()) + " floats, needs " +
                               std::to_string((e.all_logits ? T : 1) * V));
      }
      table_.insert(table_.end(), {fc->id(), T, e.all_logits ? 1 : 0});
      tokens_.insert(tokens_.end(), e.tokens.begin(), e.tokens.end());
      inner_entries_.push_back(BatchEntry{.tokens = e.tokens,
                                          .cache = &fc->inner(),
                                          .logits = e.logits,
                                          .all_logits = e.all_logits});
    }
    front_->Send(Command{.op = Op::kForwardBatch,
                         .a = static_cast<int64_t>(entries.size()),
                         .b = static_cast<int64_t>(tokens_.size())});
    if (Status st = front_->comm->Broadcast(dist::MutableBytes(std::span<int64_t>(table_)),
                                            /*patient=*/false, "batch table");
        !st.ok()) {
      Fatal(*front_->comm, st);
    }
    front_->SendTokens(tokens_);
    return inner().ForwardBatch(inner_entries_);
  }
  void SetThreads(int n_threads) override { inner().SetThreads(n_threads); }
  Status ApplyRuntimeOptions(const RuntimeOptions& options) override {
    if (!options.any()) return Status::Ok();
    return Unimplemented(std::string(FirstFlag(options)) +
                             " is not offered for a model split over processes (mpirun) yet",
                         "drop the option, or run in one process");
  }
  DraftModel* draft_model() override { return inner().draft_model(); }
  std::optional<WeightWork> weight_work_per_token() const override {
    return inner().weight_work_per_token();
  }
  int64_t routed_experts_run() const override { return inner().routed_experts_run(); }
  std::optional<ExpertStreamStats> expert_stream_stats() const override {
    return inner().expert_stream_stats();
  }
  std::optional<TableReads> table_reads() const override { return inner().table_reads(); }
  std::optional<KvUsage> kv_usage(const SequenceCache& cache) const override {
    std::lock_guard<std::mutex> lock(front_->mu);
    const FrontCache* fc = Find(&cache);
    return fc != nullptr ? inner().kv_usage(fc->inner()) : std::nullopt;
  }
  std::vector<RankTraffic> traffic() override {
    std::lock_guard<std::mutex> lock(front_->mu);
    const dist::Traffic before = front_->comm->traffic();
    front_->Send(Command{.op = Op::kTraffic});
    meta_.bytes += front_->comm->traffic().bytes - before.bytes;
    meta_.messages += front_->comm->traffic().messages - before.messages;
    Communicator& comm = *front_->comm;
    std::vector<dist::Traffic> all(comm.size());
    if (Status st = GatherTraffic(comm, meta_, all); !st.ok()) Fatal(comm, st);
    std::vector<RankTraffic> out;
    for (const dist::Traffic& t : all) out.push_back({.bytes = t.bytes, .messages = t.messages});
    return out;
  }

 private:
  Model& inner() const { return *front_->model; }
  FrontCache* Find(const SequenceCache* cache) const {  // under front_->mu
    const auto it = front_->caches.find(cache);
    return it != front_->caches.end() ? it->second : nullptr;
  }
  std::shared_ptr<Front> front_;
  dist::Traffic meta_;  // what the traffic() calls themselves sent
  // ForwardBatch's command and entries, reused (no allocation per step).
  std::vector<int64_t> table_;  // [entries, 3]: cache id, T, all_logits
  std::vector<int32_t> tokens_;
  std::vector<BatchEntry> inner_entries_;
};

// The other ranks: mirror rank 0's calls until it stops. Returns when rank 0
// sends kStop; a failure of the transport or of a mirrored call ends the job.
void RunWorker(Communicator& comm, Model& model) {
  std::map<int64_t, std::unique_ptr<SequenceCache>> caches;
  std::vector<int32_t> tokens;
  std::vector<int64_t> table;
  std::vector<BatchEntry> entries;
  dist::Traffic meta;  // what the traffic reports have cost
  const auto cache_of = [&](int64_t id) -> SequenceCache& {
    auto it = caches.find(id);
    if (it == caches.end()) {
      Fatal(comm, Status(StatusCode::kInternal,
                         "rank 0 named cache " + std::to_string(id) + ", which this rank lacks"));
    }
    return *it->second;
  };
  const auto check = [&](const Status& st) {
    if (!st.ok()) Fatal(comm, st);
  };
  while (true) {
    Command cmd;  // waited for without spinning: rank 0 may be idle a long time
    check(comm.Broadcast({reinterpret_cast<std::byte*>(&cmd), sizeof(cmd)}, /*patient=*/true));
    switch (cmd.op) {
      case Op::kStop:
        return;
      case Op::kNewCache:
        caches[cmd.a] = model.NewCache(cmd.b);
        break;
      case Op::kFreeCache:
        caches.erase(cmd.a);
        break;
      case Op::kTruncate:
        cache_of(cmd.a).Truncate(cmd.b);
        break;
      case Op::kForward: {
        tokens.resize(cmd.b);
        if (cmd.b <= kInline) {
          std::copy_n(cmd.tokens, cmd.b, tokens.begin());
        } else {
          check(comm.Broadcast(dist::MutableBytes(std::span<int32_t>(tokens)), false, "token ids"));
        }
        // The same checks fail here as on rank 0 (same cache, same tokens):
        // then neither ran anything, and the error is rank 0's to report.
        (void)model.Forward(tokens, cache_of(cmd.a), {}, cmd.c != 0);
        break;
      }
      case Op::kForwardBatch: {
        table.resize(cmd.a * 3);
        tokens.resize(cmd.b);
        check(comm.Broadcast(dist::MutableBytes(std::span<int64_t>(table)), false, "batch table"));
        check(comm.Broadcast(dist::MutableBytes(std::span<int32_t>(tokens)), false, "token ids"));
        entries.clear();
        int64_t at = 0;
        for (int64_t i = 0; i < cmd.a; ++i) {
          const int64_t n = table[i * 3 + 1];
          entries.push_back(BatchEntry{.tokens = std::span<const int32_t>(tokens).subspan(at, n),
                                       .cache = &cache_of(table[i * 3]),
                                       .logits = {},
                                       .all_logits = table[i * 3 + 2] != 0});
          at += n;
        }
        (void)model.ForwardBatch(entries);
        break;
      }
      case Op::kTraffic:
        check(GatherTraffic(comm, meta, {}));
        break;
      default:
        Fatal(comm, Status(StatusCode::kInternal,
                           "unknown command " + std::to_string(static_cast<int64_t>(cmd.op)) +
                               " from rank 0",
                           "every rank must run the same dsv4 build"));
    }
  }
}

// ---- Start-up: every rank's load Status and fingerprints, to rank 0 ----

constexpr int kMaxFiles = 64;
struct RankReport {
  int32_t code = 0;    // StatusCode
  int32_t loaded = 0;  // 1: the load succeeded (a failure came after: the split)
  int32_t n_files = 0;
  int64_t layers = 0;  // Model::pipeline_layers
  uint64_t load_hash = 0;
  uint64_t file_hash[kMaxFiles] = {};
  char message[1024] = {};
  char hint[512] = {};
};
struct Verdict {
  int32_t code = 0;
  char message[3072] = {};
  char hint[512] = {};
};

void CopyText(char* dst, size_t n, const std::string& s) { std::snprintf(dst, n, "%s", s.c_str()); }

RankReport Report(const Result<LoadedModel>& loaded, bool load_ok) {
  RankReport r;
  r.loaded = load_ok ? 1 : 0;
  if (!loaded.ok()) {
    r.code = static_cast<int32_t>(loaded.status().code());
    CopyText(r.message, sizeof(r.message), loaded.status().message());
    CopyText(r.hint, sizeof(r.hint), loaded.status().hint());
    return r;
  }
  r.layers = loaded->model->pipeline_layers();
  r.load_hash = loaded->load_hash;
  r.n_files = static_cast<int32_t>(std::min<size_t>(loaded->files.size(), kMaxFiles));
  for (int i = 0; i < r.n_files; ++i) {
    LoadedModel one;  // ModelFingerprint of one file: its size, first and last MiB
    one.files = {loaded->files[i]};
    r.file_hash[i] = ModelFingerprint(one);
  }
  return r;
}

// Rank 0's judgement of every rank's report against its own.
Status Judge(const std::vector<RankReport>& reports, const LoadedModel* own) {
  for (size_t i = 0; i < reports.size(); ++i) {
    const RankReport& r = reports[i];
    if (r.code != 0) {
      return Status(static_cast<StatusCode>(r.code),
                    "rank " + std::to_string(i) +
                        (r.loaded ? " cannot take its part: " : " could not load its part: ") +
                        r.message,
                    r.hint);
    }
  }
  const RankReport& r0 = reports[0];
  for (size_t i = 1; i < reports.size(); ++i) {
    const RankReport& r = reports[i];
    const std::string who = "rank " + std::to_string(i);
    if (r.n_files != r0.n_files) {
      return InvalidArgument(who + " loaded " + std::to_string(r.n_files) +
                                 " model files, rank 0 " + std::to_string(r0.n_files),
                             "give every rank the same model (a copy of the same files)");
    }
    for (int f = 0; f < r.n_files; ++f) {
      if (r.file_hash[f] != r0.file_hash[f]) {
        return InvalidArgument(
            who + "'s copy of " + own->files[f] +
                " differs from rank 0's (size, or its first or last MiB: the config or tensor "
                "table or weights)",
            "give every rank the same model files");
      }
    }
    if (r.load_hash != r0.load_hash || r.layers != r0.layers) {
      return InvalidArgument(who +
                                 " loaded the model with other options than rank 0 (format, "
                                 "architecture or load flags differ)",
                             "start every rank with the same command line");
    }
  }
  return Status::Ok();
}

}  // namespace

bool DistributedLaunch() { return dist::LaunchedAsSeveralProcesses(); }

Result<std::vector<int64_t>> ParseLayersSplit(std::string_view text, int64_t layers, int ranks) {
  if (layers < ranks) {
    return InvalidArgument(std::to_string(ranks) + " ranks but the model has only " +
                               std::to_string(layers) + " layers to split",
                           "start at most as many processes as the model has layers (mpirun -n)");
  }
  std::vector<int64_t> counts;
  if (text == "auto") {
    for (int r = 0; r < ranks; ++r) {
      counts.push_back(layers / ranks + (r >= ranks - layers % ranks ? 1 : 0));
    }
  } else {
    size_t at = 0;
    while (at <= text.size()) {
      const size_t comma = std::min(text.find(',', at), text.size());
      const std::string part(text.substr(at, comma - at));
      char* end = nullptr;
      const long long v = std::strtoll(part.c_str(), &end, 10);
      if (part.empty() || end != part.c_str() + part.size() || v < 1) {
        return InvalidArgument(
            "--layers-split '" + std::string(text) + "': '" + part + "' is not a layer count",
            "give one positive layer count per rank, e.g. 10,11,11,11, or auto");
      }
      counts.push_back(v);
      at = comma + 1;
    }
    int64_t sum = 0;
    for (int64_t c : counts) sum += c;
    if (static_cast<int>(counts.size()) != ranks || sum != layers) {
      return InvalidArgument("--layers-split '" + std::string(text) + "' gives " +
                                 std::to_string(counts.size()) + " ranks " + std::to_string(sum) +
                                 " layers; the job has " + std::to_string(ranks) +
                                 " ranks and the model " + std::to_string(layers) + " layers",
                             "one count per rank (mpirun -n), summing to the model's layers");
    }
  }
  std::vector<int64_t> first(1, 0);
  for (int64_t c : counts) first.push_back(first.back() + c);
  return first;
}

Result<LoadedModel> LoadDistributed(const LoadOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<Communicator> comm, dist::MpiWorld());
  const int rank = comm->rank(), size = comm->size();
  Result<LoadedModel> loaded = LoadModelInProcess(options);
  const bool load_ok = loaded.ok();
  const bool expert = options.parallel == "expert", mix = options.parallel == "pipeline,expert";
  if (loaded.ok() && options.parallel != "pipeline" && !expert && !mix) {
    loaded = InvalidArgument("--parallel '" + options.parallel + "' is not a parallelism",
                             "use pipeline, expert or pipeline,expert");
  }
  // Stages of `group` consecutive ranks: rank r runs stage r / group, whose
  // routed experts its ranks split `group` ways (it owns share r % group).
  const int stages = expert ? 1 : mix ? options.stages : size;
  const bool grouped = stages >= 1 && stages <= size && size % stages == 0;
  const int group = grouped ? size / stages : 1;
  if (loaded.ok() && !grouped) {
    loaded = InvalidArgument("--parallel pipeline,expert: --stages " + std::to_string(stages) +
                                 " does not divide the job's " + std::to_string(size) +
                                 " ranks into stages of equal size",
                             "start a multiple of --stages ranks (mpirun -n), e.g. -n 4 "
                             "--stages 2: two stages of two ranks");
  }
  const int stage = rank / group, share = rank % group;
  std::vector<int64_t> first;
  auto front = std::make_shared<Front>();
  front->comm = comm;
  front->link = std::make_unique<RingLink>(comm, group);
  // A stage's ranks all-gather their experts' outputs among themselves. Every
  // rank splits (a collective), also one whose load failed.
  std::shared_ptr<Communicator> experts = comm;
  if (mix) {
    ASSIGN_OR_RETURN(experts, comm->Split(grouped ? stage : rank));
  }
  front->gather = std::make_unique<GatherLink>(experts, comm);
  if (loaded.ok()) {
    const int64_t layers = loaded->model->pipeline_layers();
    if (expert) {
      first = {0, layers};  // every layer on every rank
    } else if (layers == 0) {
      loaded = Unimplemented(loaded->path + ": model " + loaded->model->info().architecture +
                                 " cannot be split over processes",
                             "run it without mpirun, or use a DeepSeek-V4 model");
    } else if (auto split = ParseLayersSplit(options.layers_split, layers, stages); !split.ok()) {
      loaded = mix ? split.status().WithContext("--parallel pipeline,expert, " +
                                                std::to_string(stages) + " stages")
                   : split.status();
    } else {
      first = *split;
    }
  }
  if (loaded.ok() && group > 1) {
    if (Status st = loaded->model->SetExpertShard(
            ExpertShard{.rank = share, .ranks = group, .link = front->gather.get()});
        !st.ok()) {
      loaded = st;
    }
  }
  if (loaded.ok()) {
    const PipelineStage st{.first_layer = first[stage],
                           .end_layer = first[stage + 1],
                           .front = rank == 0,
                           .link = stages > 1 ? front->link.get() : nullptr,
                           .stages = stages,
                           .micro_batch = options.pipeline_micro_batch};
    if (Status s = loaded->model->SetPipelineStage(st); !s.ok()) loaded = s;
  }

  // Every rank's report to rank 0; its verdict to every rank.
  const RankReport mine = Report(loaded, load_ok);
  std::vector<RankReport> reports(rank == 0 ? size : 0);
  RETURN_IF_ERROR(comm->Gather(dist::Bytes(std::span<const RankReport>(&mine, 1)),
                               dist::MutableBytes(std::span<RankReport>(reports))));
  Verdict verdict;
  if (rank == 0) {
    const Status st = Judge(reports, loaded.ok() ? &*loaded : nullptr);
    verdict.code = static_cast<int32_t>(st.code());
    CopyText(verdict.message, sizeof(verdict.message), st.message());
    CopyText(verdict.hint, sizeof(verdict.hint), st.hint());
  }
  RETURN_IF_ERROR(comm->Broadcast({reinterpret_cast<std::byte*>(&verdict), sizeof(verdict)}));
  if (verdict.code != 0) {
    return Status(static_cast<StatusCode>(verdict.code), verdict.message, verdict.hint);
  }
  // From here on a wait inside a call is bounded (--mpi-timeout); the
  // start-up above is not (a rank may load for long).
  comm->set_timeout(options.mpi_timeout_s);
  experts->set_timeout(options.mpi_timeout_s);
  front->link->set_split(first);

  if (rank == 0) {
    const auto layers = [&] {
      std::string s;
      for (int r = 0; r < stages; ++r) {
        s += (r ? ", " : "") + std::to_string(first[r]) + ".." + std::to_string(first[r + 1] - 1);
      }
      return s;
    };
    if (expert) {
      LOG_INFO(
          "mpirun: {} ranks, expert parallel (every layer on every rank, routed experts split)",
          size);
    } else if (mix) {
      LOG_INFO(
          "mpirun: {} ranks, pipeline and expert parallel: {} stages of {} ranks, layers split "
          "{}, each stage's routed experts split {} ways",
          size, stages, group, layers(), group);
    } else {
      LOG_INFO("mpirun: {} ranks, pipeline parallel, layers split {}", size, layers());
    }
    front->model = std::move(loaded->model);
    loaded->model = std::make_unique<FrontModel>(front);
    return loaded;
  }
  RunWorker(*comm, *loaded->model);
  loaded->model.reset();
  front.reset();
  std::exit(0);  // MPI is finalised at exit (dist/communicator.h)
}

}  // namespace dsv4
