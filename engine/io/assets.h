// Where files named in a netdef are looked for. A relative path resolves against the netdef's
// own directory, then each asset root in order; an absolute path or one with '..' must still
// land inside one of those directories, so a downloaded netdef cannot read /etc/passwd. Paths
// the user types on the command line (--data, --weights) are taken as given.
#pragma once

#include <string>
#include <vector>

#include "engine/core/error.h"

namespace cnnrun {

class AssetResolver {
 public:
  // roots: --assets DIRs in order, then $CNNRUN_ASSETS (colon-separated), then
  // /usr/share/datasets (where Debian's dataset packages install).
  AssetResolver(std::string netdef_dir, std::vector<std::string> roots);
  static std::vector<std::string> default_roots(const std::vector<std::string>& cli_roots);

  // Resolves a path written in the netdef at `loc` (for the error message); `what` says what it
  // is ("data file"). Throws if it does not exist under any root or escapes them.
  std::string resolve(const std::string& path, const SourceLoc& loc, const std::string& what) const;
  const std::vector<std::string>& roots() const { return roots_; }

 private:
  std::string netdef_dir_;
  std::vector<std::string> roots_;
};

}  // namespace cnnrun
