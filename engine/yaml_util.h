// Strict reading of YAML scalars with source positions (yaml-cpp's own conversions accept
// "1e3" as an int's failure only by exception and say nothing of where).
#pragma once

#include <string>
#include <vector>

#include "engine/core/error.h"

namespace YAML {
class Node;
}

namespace cnnrun {

SourceLoc yaml_loc(const std::string& file, const YAML::Node& n);
// Each returns false with `why` set ("expected an integer, found 'abc'").
bool yaml_int(const YAML::Node& n, int64_t& out, std::string& why);
bool yaml_double(const YAML::Node& n, double& out, std::string& why);  // finite only
bool yaml_bool(const YAML::Node& n, bool& out, std::string& why);
// "; did you mean 'filters'?" for the nearest known key, or the list of keys.
std::string suggest(const std::string& key, const std::vector<std::string>& known);
// Throws on the first mapping with a key written twice, anywhere under n.
void check_duplicate_keys(const std::string& file, const YAML::Node& n);

}  // namespace cnnrun
