// Asset resolution: relative and absolute paths, precedence of the roots, and escapes through
// '..' and symlinks, all checked on real directories.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "engine/io/assets.h"
#include "tests/test_util.h"

using namespace cnnrun;
namespace fs = std::filesystem;

namespace {

// doctest::Contains takes a doctest::String, which std::string does not convert to.
doctest::Contains has(const std::string& s) { return doctest::Contains(s.c_str()); }

struct Tree {
  std::string root, netdefs, assets, outside;
  Tree() {
    root = fs::canonical(test::temp_dir("assets")).string();
    netdefs = root + "/netdefs";
    assets = root + "/assets";
    outside = root + "/outside";
    for (const auto& d : {netdefs, assets + "/data", outside, root + "/assets2"}) fs::create_directories(d);
    test::write_file(netdefs + "/local.bin", "L");
    test::write_file(netdefs + "/both.bin", "N");
    test::write_file(assets + "/both.bin", "A");
    test::write_file(assets + "/data/a.bin", "a");
    test::write_file(outside + "/secret.txt", "s");
    test::write_file(root + "/assets2/f.bin", "f");
  }
  AssetResolver resolver() const { return AssetResolver(netdefs, {assets}); }
};

const SourceLoc kLoc{"net.yaml", 3, 7};

}  // namespace

TEST_CASE("assets: relative paths resolve against the netdef dir, then the roots in order") {
  Tree t;
  AssetResolver r = t.resolver();
  CHECK(r.resolve("local.bin", kLoc, "data file") == t.netdefs + "/local.bin");
  CHECK(r.resolve("data/a.bin", kLoc, "data file") == t.assets + "/data/a.bin");
  CHECK(r.resolve("both.bin", kLoc, "data file") == t.netdefs + "/both.bin");
  CHECK(r.resolve("data", kLoc, "data directory") == t.assets + "/data");
  // '..' that stays inside a root is fine. It is applied by the file system, so "data/.." exists
  // only under the asset root, not under the netdef dir (which has no data/).
  CHECK(r.resolve("data/../both.bin", kLoc, "data file") == t.assets + "/both.bin");
  CHECK(r.resolve("../assets/data/a.bin", kLoc, "data file") == t.assets + "/data/a.bin");
  // A later root is used when the earlier ones lack the file.
  AssetResolver r2(t.netdefs, {t.outside, t.assets});
  CHECK(r2.resolve("data/a.bin", kLoc, "data file") == t.assets + "/data/a.bin");
  CHECK(r2.resolve("secret.txt", kLoc, "data file") == t.outside + "/secret.txt");
}

TEST_CASE("assets: absolute paths must lie inside a root") {
  Tree t;
  AssetResolver r = t.resolver();
  CHECK(r.resolve(t.assets + "/data/a.bin", kLoc, "data file") == t.assets + "/data/a.bin");
  CHECK(r.resolve(t.netdefs + "/local.bin", kLoc, "data file") == t.netdefs + "/local.bin");
  CHECK_THROWS_WITH_AS(r.resolve(t.outside + "/secret.txt", kLoc, "data file"),
                       has("net.yaml:3:7: data file '" + t.outside +
                           "/secret.txt' resolves outside the netdef's directory and the asset roots (" +
                           t.netdefs + ", " + t.assets + ")"),
                       Error);
  // A sibling whose name starts with a root's name is not inside it.
  CHECK_THROWS_WITH_AS(r.resolve(t.root + "/assets2/f.bin", kLoc, "data file"), has("resolves outside"),
                       Error);
  CHECK_THROWS_WITH_AS(r.resolve("/etc/passwd", kLoc, "data file"),
                       has("add the directory with --assets DIR or CNNRUN_ASSETS"), Error);
}

TEST_CASE("assets: '..' escapes are refused") {
  Tree t;
  AssetResolver r = t.resolver();
  CHECK_THROWS_WITH_AS(r.resolve("../../etc/passwd", kLoc, "weights file"),
                       has("net.yaml:3:7: weights file '../../etc/passwd' resolves outside"), Error);
  CHECK_THROWS_WITH_AS(r.resolve("../../../../../../../../../../etc/passwd", kLoc, "data file"),
                       has("resolves outside"), Error);
  CHECK_THROWS_WITH_AS(r.resolve("../outside/secret.txt", kLoc, "data file"), has("resolves outside"), Error);
  CHECK_THROWS_WITH_AS(r.resolve("data/../../outside/secret.txt", kLoc, "data file"), has("resolves outside"),
                       Error);
}

TEST_CASE("assets: symlinks are followed before the check") {
  Tree t;
  fs::create_directory_symlink(t.outside, t.netdefs + "/out");
  fs::create_symlink(t.outside + "/secret.txt", t.assets + "/s.txt");
  fs::create_directory_symlink(t.assets + "/data", t.netdefs + "/in");
  AssetResolver r = t.resolver();
  CHECK_THROWS_WITH_AS(r.resolve("out/secret.txt", kLoc, "data file"), has("resolves outside"), Error);
  CHECK_THROWS_WITH_AS(r.resolve("s.txt", kLoc, "data file"), has("resolves outside"), Error);
  CHECK_THROWS_WITH_AS(r.resolve(t.netdefs + "/out/secret.txt", kLoc, "data file"), has("resolves outside"),
                       Error);
  // A link that lands inside another root is fine, and resolves to the real path.
  CHECK(r.resolve("in/a.bin", kLoc, "data file") == t.assets + "/data/a.bin");
}

TEST_CASE("assets: not found names the places looked in") {
  Tree t;
  AssetResolver r(t.netdefs, {t.assets, t.root + "/nonexistent"});
  CHECK_THROWS_WITH_AS(r.resolve("missing.bin", kLoc, "data file"),
                       has("net.yaml:3:7: data file 'missing.bin' not found; looked in: " + t.netdefs +
                           "/missing.bin, " + t.assets + "/missing.bin"),
                       Error);
  CHECK_THROWS_WITH_AS(r.resolve(t.assets + "/nope.bin", kLoc, "data file"),
                       has("not found; looked in: " + t.assets + "/nope.bin"), Error);
  CHECK_THROWS_WITH_AS(r.resolve("", kLoc, "data file"), has("empty path"), Error);
}

TEST_CASE("assets: default roots are --assets, then $CNNRUN_ASSETS, then /usr/share/datasets") {
  const char* old = std::getenv("CNNRUN_ASSETS");
  std::string saved = old ? old : "";
  setenv("CNNRUN_ASSETS", "/env/a::/env/b:", 1);
  auto roots = AssetResolver::default_roots({"/cli/1", "/cli/2"});
  CHECK(roots == std::vector<std::string>{"/cli/1", "/cli/2", "/env/a", "/env/b", "/usr/share/datasets"});
  unsetenv("CNNRUN_ASSETS");
  CHECK(AssetResolver::default_roots({}) == std::vector<std::string>{"/usr/share/datasets"});
  if (old) setenv("CNNRUN_ASSETS", saved.c_str(), 1);
}
