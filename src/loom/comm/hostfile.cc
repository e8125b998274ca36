#include "loom/comm/hostfile.h"

#include <nlohmann/json.hpp>

#include "loom/base/mapped_file.h"

namespace loom::comm {

namespace {

using nlohmann::json;

// Environment names: letters, digits and '_', not starting with a digit.
bool ValidEnvName(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

Status ParseHost(const json& j, const std::string& where, HostEntry* out) {
  if (!j.is_object()) return InvalidArgumentError(where, " must be an object");
  HostEntry h;
  for (const auto& [key, value] : j.items()) {
    const std::string at = where + "." + key;
    if (key == "ssh") {
      if (!value.is_string()) return InvalidArgumentError(at, " must be a string");
      h.ssh = value.get<std::string>();
      if (!h.ssh.empty() && h.ssh[0] == '-') {
        return InvalidArgumentError(at, " '", h.ssh, "' must not start with '-'");
      }
    } else if (key == "ips") {
      if (!value.is_array()) return InvalidArgumentError(at, " must be an array of strings");
      for (size_t i = 0; i < value.size(); ++i) {
        if (!value[i].is_string() || value[i].get<std::string>().empty()) {
          return InvalidArgumentError(at, "[", i, "] must be a non-empty string");
        }
        h.ips.push_back(value[i].get<std::string>());
      }
    } else if (key == "slots") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 1024) {
        return InvalidArgumentError(at, " must be an integer 1..1024");
      }
      h.slots = value.get<int>();
    } else if (key == "port") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 65535) {
        return InvalidArgumentError(at, " must be an integer 1..65535");
      }
      h.port = value.get<int>();
    } else if (key == "env") {
      if (!value.is_object()) return InvalidArgumentError(at, " must be an object of strings");
      for (const auto& [name, v] : value.items()) {
        if (!ValidEnvName(name))
          return InvalidArgumentError(at, ": bad variable name '", name, "'");
        if (!v.is_string()) return InvalidArgumentError(at, ".", name, " must be a string");
        h.env.emplace_back(name, v.get<std::string>());
      }
    } else if (key == "cwd") {
      if (!value.is_string()) return InvalidArgumentError(at, " must be a string");
      h.cwd = value.get<std::string>();
    } else {
      return InvalidArgumentError(where, ": unknown key '", key,
                                  "' (known: ssh, ips, slots, port, env, cwd)");
    }
  }
  if (!h.local() && h.ips.empty()) {
    return InvalidArgumentError(where, " (", h.ssh,
                                "): a remote host needs \"ips\", the address the other ranks "
                                "reach it at");
  }
  if (h.port != 0 && h.port + h.slots - 1 > 65535) {
    return InvalidArgumentError(where, ": ports ", h.port, "..", h.port + h.slots - 1,
                                " exceed 65535");
  }
  *out = std::move(h);
  return OkStatus();
}

}  // namespace

bool HostEntry::local() const {
  return ssh.empty() || ssh == "localhost" || ssh == "127.0.0.1" || ssh == "::1";
}

std::string HostEntry::address() const {
  if (!ips.empty()) return ips.front();
  return "127.0.0.1";
}

std::string HostEntry::name() const { return ssh.empty() ? std::string("localhost") : ssh; }

int HostEntry::PortOf(int index) const { return (port != 0 ? port : kDefaultPort) + index; }

std::string FormatHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return StrCat("[", host, "]:", port);
  return StrCat(host, ":", port);
}

StatusOr<std::vector<std::string>> PeersFromHostfile(const Hostfile& hostfile, int ranks) {
  if (ranks < 1 || ranks > hostfile.total_slots()) {
    return InvalidArgumentError("hostfile: ", ranks, " ranks but the hostfile has ",
                                hostfile.total_slots(), " slots");
  }
  std::vector<std::string> peers;
  for (const HostEntry& h : hostfile.hosts) {
    for (int i = 0; i < h.slots && static_cast<int>(peers.size()) < ranks; ++i) {
      if (h.PortOf(i) > 65535) {
        return InvalidArgumentError("hostfile: host ", h.name(), " rank ", i, " would listen on port ",
                                    h.PortOf(i));
      }
      peers.push_back(FormatHostPort(h.address(), h.PortOf(i)));
    }
  }
  return peers;
}

int Hostfile::total_slots() const {
  int n = 0;
  for (const HostEntry& h : hosts) n += h.slots;
  return n;
}

StatusOr<Hostfile> ParseHostfile(std::string_view json_text, std::string_view source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return InvalidArgumentError("hostfile ", source, ": not valid JSON: ", e.what());
  }
  const json* list = &j;
  if (j.is_object()) {
    if (j.size() != 1 || !j.contains("hosts")) {
      return InvalidArgumentError("hostfile ", source,
                                  ": expected a list of hosts or {\"hosts\": [...]}");
    }
    list = &j["hosts"];
  }
  if (!list->is_array() || list->empty()) {
    return InvalidArgumentError("hostfile ", source, ": expected a non-empty list of hosts");
  }
  Hostfile hf;
  for (size_t i = 0; i < list->size(); ++i) {
    HostEntry h;
    LOOM_RETURN_IF_ERROR(
        ParseHost((*list)[i], StrCat("hostfile ", source, ": hosts[", i, "]"), &h));
    hf.hosts.push_back(std::move(h));
  }
  return hf;
}

StatusOr<Hostfile> LoadHostfile(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, base::ReadFileToString(path));
  return ParseHostfile(text, path);
}

}  // namespace loom::comm
