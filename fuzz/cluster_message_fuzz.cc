// Fuzzes the cluster daemon's message parsing (announcements from the network, control frames
// from other daemons): any input either splits into an envelope whose decoders return a message
// or a Status, never a crash.  A decoded message must re-encode to the same body.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "loom/cluster/messages.h"

using namespace loom::cluster;

namespace {

// The body of an envelope re-encoded with `encode` must equal the body it was decoded from.
void CheckBody(const Envelope& e, const std::vector<uint8_t>& again) {
  auto back = SplitEnvelope(again);
  if (!back.ok()) __builtin_trap();
  if (back->body.size() != e.body.size() ||
      std::memcmp(back->body.data(), e.body.data(), e.body.size()) != 0) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  if (size >= static_cast<size_t>(kHeaderBytes)) (void)EnvelopeSize(in);
  auto e = SplitEnvelope(in);
  if (!e.ok()) return 0;
  static const Key key = DeriveKey("fuzz", KeyPurpose::kAnnounce);
  (void)Authenticate(*e, key);
  switch (e->type) {
    case MessageType::kAnnounce:
      if (auto m = DecodeAnnounce(*e); m.ok()) CheckBody(*e, EncodeAnnounce(*m, key, e->seq));
      break;
    case MessageType::kHello:
      if (auto m = DecodeHello(*e); m.ok()) CheckBody(*e, EncodeHello(*m, key));
      break;
    case MessageType::kWelcome:
      if (auto m = DecodeWelcome(*e); m.ok()) CheckBody(*e, EncodeWelcome(*m, key));
      break;
    case MessageType::kConfirm:
      if (auto m = DecodeConfirm(*e); m.ok()) CheckBody(*e, EncodeConfirm(*m, key));
      break;
    case MessageType::kReject:
      if (auto m = DecodeReject(*e); m.ok()) CheckBody(*e, EncodeReject(*m));
      break;
    case MessageType::kFacts:
      if (auto m = DecodeFacts(*e); m.ok()) CheckBody(*e, EncodeFacts(*m, key, e->seq));
      break;
    case MessageType::kHeartbeat:
      if (auto m = DecodeHeartbeat(*e); m.ok()) CheckBody(*e, EncodeHeartbeat(*m, key, e->seq));
      break;
    case MessageType::kProbeStart:
      if (auto m = DecodeProbeStart(*e); m.ok()) CheckBody(*e, EncodeProbeStart(*m, key, e->seq));
      break;
    case MessageType::kProbeReady:
      if (auto m = DecodeProbeReady(*e); m.ok()) CheckBody(*e, EncodeProbeReady(*m, key, e->seq));
      break;
    case MessageType::kProbeBusy:
      if (auto m = DecodeProbeBusy(*e); m.ok()) CheckBody(*e, EncodeProbeBusy(*m, key, e->seq));
      break;
    case MessageType::kLinks:
      if (auto m = DecodeLinks(*e); m.ok()) CheckBody(*e, EncodeLinks(*m, key, e->seq));
      break;
    case MessageType::kRankReserve:
      if (auto m = DecodeRankReserve(*e); m.ok()) CheckBody(*e, EncodeRankReserve(*m, key, e->seq));
      break;
    case MessageType::kRankReserved:
      if (auto m = DecodeRankReserved(*e); m.ok()) {
        CheckBody(*e, EncodeRankReserved(*m, key, e->seq));
      }
      break;
    case MessageType::kRankStart:
      if (auto m = DecodeRankStart(*e); m.ok()) CheckBody(*e, EncodeRankStart(*m, key, e->seq));
      break;
    case MessageType::kRankExit:
      if (auto m = DecodeRankExit(*e); m.ok()) CheckBody(*e, EncodeRankExit(*m, key, e->seq));
      break;
    case MessageType::kRankStop:
      if (auto m = DecodeRankStop(*e); m.ok()) CheckBody(*e, EncodeRankStop(*m, key, e->seq));
      break;
  }
  return 0;
}
