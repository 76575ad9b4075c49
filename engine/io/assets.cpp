// Asset resolution. The check is made on real paths (symlinks and '..' resolved by the file
// system), because a lexical check is fooled by a symlink inside a root pointing out of it.
#include "engine/io/assets.h"

#include <cstdlib>
#include <filesystem>

#include "engine/io/files.h"

namespace cnnrun {

namespace fs = std::filesystem;

namespace {

// The real path of an existing directory, or empty when it does not exist.
fs::path real_dir(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::canonical(dir.empty() ? "." : dir, ec);
  if (ec || !fs::is_directory(p, ec)) return {};
  return p;
}

std::string join_list(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

}  // namespace

AssetResolver::AssetResolver(std::string netdef_dir, std::vector<std::string> roots)
    : netdef_dir_(netdef_dir.empty() ? "." : std::move(netdef_dir)), roots_(std::move(roots)) {}

std::vector<std::string> AssetResolver::default_roots(const std::vector<std::string>& cli_roots) {
  std::vector<std::string> r = cli_roots;
  if (const char* env = std::getenv("CNNRUN_ASSETS")) {
    std::string s = env;
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) r.push_back(s.substr(start, end - start));
      start = end + 1;
    }
  }
  r.push_back("/usr/share/datasets");
  return r;
}

std::string AssetResolver::resolve(const std::string& path, const SourceLoc& loc,
                                   const std::string& what) const {
  if (path.empty()) fail_at(loc, "", "", "", what + ": empty path");
  std::vector<std::string> all{netdef_dir_};
  all.insert(all.end(), roots_.begin(), roots_.end());
  std::vector<fs::path> real_roots;
  for (const auto& r : all) real_roots.push_back(real_dir(r));

  auto within_a_root = [&](const fs::path& real) {
    for (const auto& rr : real_roots)
      if (!rr.empty() && path_inside(real, rr)) return true;
    return false;
  };

  fs::path p(path);
  std::vector<std::string> looked;
  bool escaped = false;
  std::vector<fs::path> candidates;
  if (p.is_absolute()) {
    candidates.push_back(p);
  } else {
    for (const auto& r : all) candidates.push_back(fs::path(r) / p);
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    const fs::path& c = candidates[i];
    if (!p.is_absolute() && real_roots[i].empty()) {
      looked.push_back(c.string() + " (no such directory " + all[i] + ")");
      continue;
    }
    std::error_code ec;
    fs::path real = fs::canonical(c, ec);
    if (ec) {
      // A dangling symlink or missing file: if the lexical place is outside every root it still
      // counts as an escape attempt, so the message says so instead of "not found".
      fs::path weak = fs::weakly_canonical(c, ec);
      if (!ec && !within_a_root(weak)) escaped = true;
      looked.push_back(c.lexically_normal().string());
      continue;
    }
    if (within_a_root(real)) return real.string();
    escaped = true;
  }
  if (escaped)
    fail_at(loc, "", "", "",
            what + " '" + path + "' resolves outside the netdef's directory and the asset roots (" +
                join_list(all) + "); add the directory with --assets DIR or CNNRUN_ASSETS");
  fail_at(loc, "", "", "",
          what + " '" + path + "' not found; looked in: " + join_list(looked) +
              "; add its directory with --assets DIR or CNNRUN_ASSETS");
}

}  // namespace cnnrun
