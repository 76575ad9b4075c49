#include "engine/yaml_util.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

namespace cnnrun {

SourceLoc yaml_loc(const std::string& file, const YAML::Node& n) {
  YAML::Mark m = n.Mark();
  if (m.is_null()) return {file, 0, 0};
  return {file, m.line + 1, m.column + 1};
}

static std::string shown(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

bool yaml_int(const YAML::Node& n, int64_t& out, std::string& why) {
  why = "expected an integer, found " + shown(n);
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  if (s.empty() || s.size() > 40) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size() || !std::all_of(s.begin() + static_cast<long>(i), s.end(), ::isdigit)) return false;
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) {
    why = "integer " + s + " is out of range";
    return false;
  }
  out = v;
  return true;
}

bool yaml_double(const YAML::Node& n, double& out, std::string& why) {
  why = "expected a number, found " + shown(n);
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return false;
  if (errno == ERANGE || !std::isfinite(v)) {
    why = "number " + s + " is not finite or out of range";
    return false;
  }
  out = v;
  return true;
}

bool yaml_bool(const YAML::Node& n, bool& out, std::string& why) {
  why = "expected true or false, found " + shown(n);
  if (!n.IsScalar()) return false;
  const std::string& s = n.Scalar();
  if (s == "true" || s == "yes" || s == "on")
    out = true;
  else if (s == "false" || s == "no" || s == "off")
    out = false;
  else
    return false;
  return true;
}

// Levenshtein distance, but only up to `limit`: a pair whose lengths differ by `limit` or more
// is not compared, and a row whose smallest entry reaches `limit` ends the walk, so a long
// name against a long list costs O(names * length * limit), not O(names * length^2).
static size_t edit_distance(const std::string& a, const std::string& b, size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) >= limit) return limit;
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    size_t row_min = cur[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      row_min = std::min(row_min, cur[j]);
    }
    if (row_min >= limit) return limit;
    std::swap(prev, cur);
  }
  return std::min(prev[b.size()], limit);
}

std::string suggest(const std::string& key, const std::vector<std::string>& known) {
  if (known.empty()) return "; this takes no keys here";
  // A misspelling is within 2 edits; keys longer than any name a user types get no guess.
  constexpr size_t kMaxEdits = 3, kMaxKeyLength = 256, kMaxListed = 40;
  std::string best;
  size_t best_d = kMaxEdits;
  if (key.size() <= kMaxKeyLength)
    for (const auto& k : known) {
      size_t d = edit_distance(key, k, best_d);
      if (d < best_d) {
        best_d = d;
        best = k;
      }
    }
  if (!best.empty()) return "; did you mean '" + best + "'?";
  std::string list;
  for (size_t i = 0; i < known.size() && i < kMaxListed; ++i) list += (i ? ", " : "") + known[i];
  if (known.size() > kMaxListed) list += ", ... (" + std::to_string(known.size()) + " in all)";
  return "; expected one of: " + list;
}

// Aliases make the document a graph: "x2: &x2 [*x1, *x1, ...]" ten levels deep is a few lines that
// expand to 10^10 nodes, and "&a [*a]" contains itself. So the walk has a node budget and a depth
// limit, both far above any real netdef.
static void check_duplicate_keys(const std::string& file, const YAML::Node& n, int64_t& budget, int depth) {
  if (--budget < 0)
    fail_at(yaml_loc(file, n), "", "", "",
            "the document expands to over a million YAML nodes (aliases of aliases?); not a netdef");
  if (depth > 100)
    fail_at(yaml_loc(file, n), "", "", "", "nested more than 100 levels deep (an alias inside itself?)");
  if (n.IsMap()) {
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (it->first.IsScalar() && !seen.insert(it->first.Scalar()).second)
        fail_at(yaml_loc(file, it->first), "", "", it->first.Scalar(), "written twice in one mapping");
      check_duplicate_keys(file, it->second, budget, depth + 1);
    }
  } else if (n.IsSequence()) {
    for (auto it = n.begin(); it != n.end(); ++it) check_duplicate_keys(file, *it, budget, depth + 1);
  }
}

void check_duplicate_keys(const std::string& file, const YAML::Node& n) {
  int64_t budget = 1'000'000;
  check_duplicate_keys(file, n, budget, 0);
}

}  // namespace cnnrun
