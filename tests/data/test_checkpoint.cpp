// tests/data/test_checkpoint.cpp: load_checkpoint round-trips a checkpoint and
// refuses every damaged, corrupt, mistyped or mistaken file with a
// heed::Error that names the file and the problem (never another exception).
#include "data/checkpoint.h"
#include "data/file_damage.h"
#include "data/h5.h"
#include "data/runlog.h"
#include "test_util.h"

using namespace heed;

TEST_CASE("checkpoint: save and load round-trip; a flipped byte in a tensor's data is refused naming the tensor") {
  test::DamageDir d("heed-ckpt-crc-");
  std::string path = d.file("sine.ckpt.h5");
  Checkpoint ck = test::small_checkpoint();
  save_checkpoint(path, ck);
  Checkpoint back = load_checkpoint(path, "sine");
  CHECK(back.config == ck.config);
  CHECK(back.counters == ck.counters);
  REQUIRE(back.tensors.size() == ck.tensors.size());
  for (const auto& [k, t] : ck.tensors) CHECK(test::tensor_bytes(back.tensors.at(k)) == test::tensor_bytes(t));

  test::flip_byte_in(path, test::tensor_bytes(ck.tensors.at("model/l1.weight")), 5);
  test::check_error([&] { load_checkpoint(path, "sine"); },
                    {"checkpoint '" + path + "': tensor 'model/l1.weight' is corrupt (CRC mismatch)", "checksum"});
}
