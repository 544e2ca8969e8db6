#include "proto/lmr/handles.h"

namespace lt::proto {

Status HandleTable::add_name(const std::string& name, LmrHandle h, uint32_t max_rights) {
  std::lock_guard<std::mutex> g(names_mu_);
  if (names_.count(name)) return Code::kExists;
  names_[name] = {h, max_rights};
  return Status::ok();
}

void HandleTable::remove_name(const std::string& name) {
  std::lock_guard<std::mutex> g(names_mu_);
  names_.erase(name);
}

std::vector<std::string> HandleTable::remove_names_of(LmrHandle h) {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> g(names_mu_);
  for (auto it = names_.begin(); it != names_.end();) {
    if (it->second.first == h) {
      out.push_back(it->first);
      it = names_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

Status HandleTable::lookup_name(const std::string& name, uint32_t rights,
                                std::shared_ptr<Mapping>* master) const {
  std::lock_guard<std::mutex> g(names_mu_);
  auto it = names_.find(name);
  if (it == names_.end()) return Code::kNotFound;
  if (rights == 0 || (rights & it->second.second) != rights) return Code::kPerm;
  return table_.get(it->second.first, master);
}

}  // namespace lt::proto
