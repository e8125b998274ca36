// The node agent's state and the functions over it, split across agent.cc (identity, start-up,
// the hub connection, model loading, heartbeats and status.json) and agent_attempts.cc (the
// attempts the hub assigns: the call to the `loom serve` child, relaying its stream, finishing).
// Everything runs on the io_context thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "loom/net/http_client.h"
#include "loom/net/tls.h"
#include "loom/net/url.h"
#include "loom/net/websocket.h"
#include "loom/network/node/agent.h"
#include "loom/network/node/node_facts.h"
#include "loom/network/protocol/frames.h"
#include "loom/network/protocol/identity.h"

namespace loom::network::node {

using json = nlohmann::json;

// One attempt the hub assigned (agent_attempts.cc), from its assign frame to its complete or error.
struct Attempt {
  std::string id;
  std::string model;
  std::string endpoint;
  json request;
  std::shared_ptr<net::ClientCall> call;
  std::string buffer;       // SSE bytes not yet split into events
  int status = 0;           // the child's HTTP status
  std::string error_body;   // when status != 200
  int64_t index = 0;        // next chunk index
  bool accepted = false;
  std::string finish_reason;
  int64_t completion_tokens = 0;
  int64_t prompt_tokens = 0;
  std::string pending_text;           // parsed from the current read, not yet sent
  std::vector<int32_t> pending_ids;
  std::vector<double> pending_logprobs, pending_best;  // scoring requests: one per pending id
  double last_flush = 0;  // when the last chunk was sent (0: none yet)
  bool waiting_for_load = false;
};

class Agent::Impl {
 public:
  Impl(boost::asio::io_context& io, AgentOptions o)
      : io_(io), options_(std::move(o)), heartbeat_(io), reconnect_(io), flush_(io),
        random_(std::random_device{}()) {}

  Status Init();
  void Connect();
  void OnMessage(std::string_view text);
  void OnClosed(std::string_view reason);
  void Send(const protocol::Frame& f) {
    if (ws_ && ws_->open()) ws_->Send(protocol::SerializeFrame(f));
  }
  void SendError(const std::string& attempt, std::string code, std::string message, int status);
  void OnAssign(const protocol::Assign& a);
  void StartCall(Attempt& a);
  void OnData(const std::string& id, std::string_view data);
  void OnEvent(Attempt& a, std::string_view data);
  void FlushChunk(Attempt& a);
  // FlushChunk now if the attempt's last chunk is chunk_interval_s old, else when it will be.
  void MaybeFlush(Attempt& a);
  void OnFlushTimer();
  void OnDone(const std::string& id, const Status& s);
  void Finish(const std::string& id);
  void Load(const std::string& name);
  // The hub's load_model / unload_model.  An unload waits for the model's running attempts.
  void OnLoadModel(const std::string& name);
  void OnUnloadModel(const std::string& name);
  void Unload(const std::string& name);
  int64_t Footprint(const LocalModel& m) const {
    return protocol::LoadedFootprint(m.info, options_.serve.parallel);
  }
  void Heartbeat();
  std::vector<protocol::ModelInfo> ModelInfos() const;
  int64_t MemFree() const;
  bool Paused();
  void WriteStatus();
  void MaybeDrained();

  boost::asio::io_context& io_;
  AgentOptions options_;
  Identity identity_;
  std::unique_ptr<protocol::NodeKey> key_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  net::Url endpoint_;
  protocol::NodeFacts facts_;
  int64_t max_memory_ = 0;
  std::vector<LocalModel> models_;
  std::map<std::string, std::unique_ptr<ModelServer>> servers_;
  std::set<std::string> unload_pending_;  // the hub asked; unloaded when its attempts end
  std::shared_ptr<net::WebSocket> ws_;
  bool welcomed_ = false;
  int64_t heartbeat_ms_ = 5000;  // as the hub's welcome says
  double backoff_s_ = 0.5;
  boost::asio::steady_timer heartbeat_, reconnect_;
  boost::asio::steady_timer flush_;  // the next paced chunk of any attempt (MaybeFlush)
  double flush_at_ = 0;              // when flush_ fires; 0: not armed
  std::map<std::string, Attempt> attempts_;
  bool draining_ = false;
  bool paused_ = false;
  std::function<void()> drained_;
  Schedule schedule_;
  std::optional<protocol::SlotOffer> slot_;  // --reserve
  std::optional<protocol::Standing> standing_;  // the hub's latest report to this operator
  Status ParseSlot();
  BusyMeter busy_;
  std::mt19937_64 random_;
  std::shared_ptr<int> life_ = std::make_shared<int>(0);
};

}  // namespace loom::network::node
