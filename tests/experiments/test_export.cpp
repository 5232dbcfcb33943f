// tests/experiments/test_export.cpp: `heed export` and `--init-from` as a
// user runs them: which model of a checkpoint of several it writes, and the
// scaling run that refuses given weights it cannot use.
#include <filesystem>
#include <fstream>

#include "spawn.h"
#include "test_util.h"

using namespace heed;
using test::heed_cli;
using test::Result;
using test::snapshot;
namespace fs = std::filesystem;

TEST_CASE("export: a checkpoint of several models names them whole, and --model takes one model, not a group") {
  test::TempDir d("heed-export-");
  const std::string p = d.path;
  Result r = heed_cli({"run", "scaling", "--dk-max", "8", "--queries", "4", "--keys", "4", "--seeds", "2", "--dim",
                       "8", "--length", "4", "--vocab", "4", "--batch", "4", "--steps", "3", "--eval-every", "3",
                       "--threads", "1", "--out", p + "/sc.h5"},
                      p);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  const std::string ckpt = p + "/sc.ckpt.h5";
  const auto before = snapshot(p);
  // "several models (scaled, unscaled)": neither is a model.
  r = heed_cli({"export", ckpt}, p);
  CHECK(r.status == 2);
  CHECK(r.err.find("holds several models (scaled/seed0, scaled/seed1, unscaled/seed0, unscaled/seed1); choose one "
                   "with --model") != std::string::npos);
  // --model unscaled wrote seed0/... and seed1/... together, which no model loads.
  r = heed_cli({"export", ckpt, "--model", "unscaled", "-o", p + "/u.safetensors"}, p);
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("--model unscaled names a group of 2 models in checkpoint '" + ckpt +
                   "' (unscaled/seed0, unscaled/seed1); expected one of them") != std::string::npos);
  r = heed_cli({"export", ckpt, "--model", "seed0", "-o", p + "/u.safetensors"}, p);
  CHECK(r.status == 2);
  CHECK(r.err.find("has no model 'seed0' (its models: scaled/seed0, scaled/seed1, unscaled/seed0, unscaled/seed1)") !=
        std::string::npos);
  CHECK(snapshot(p) == before);
  r = heed_cli({"export", ckpt, "--model", "unscaled/seed1", "-o", p + "/u1.safetensors"}, p);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const Checkpoint ck = load_checkpoint(ckpt, "scaling");
  const auto weights = safetensors::load(p + "/u1.safetensors").tensors;
  const auto expected = ck.get("model/unscaled/seed1");
  REQUIRE(weights.size() == expected.size());
  for (const auto& [k, t] : expected) {
    CAPTURE(k);
    REQUIRE(weights.count(k) == 1);
    CHECK(weights.at(k).to_vector<double>() == t.to_vector<double>());
  }
  // scaling cannot start from a file: it said "train one of them", which it cannot.
  r = heed_cli({"run", "scaling", "--dk-max", "8", "--seeds", "2", "--dim", "8", "--steps", "3", "--init-from",
                p + "/u1.safetensors", "--out", p + "/sc2.h5"},
               p);
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("run scaling: --init-from '" + p + "/u1.safetensors': scaling trains 4 models") !=
        std::string::npos);
  CHECK(r.err.find("train one of them") == std::string::npos);
  CHECK(!fs::exists(p + "/sc2.h5"));
}
