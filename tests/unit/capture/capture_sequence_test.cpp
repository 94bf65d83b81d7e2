// capture_sequence_test.cpp — the stream filter of a capture (src/capture/capture_filter.hpp) on
// the sim driver, which reports a capture id only while the capture is active, as CUDA does: an
// active stream is in the sequence by its id; once invalidated, by what the sequence saw (its
// origin, and side streams it accepted while active); another capture's invalidated stream, a
// stream that does not capture and an unknown stream are not in it.
#include <gtest/gtest.h>

#include <memory>

#include "capture/capture_filter.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::testing {
namespace {

struct sequence_env {
  std::shared_ptr<sim_driver> sim = std::make_shared<sim_driver>();
  stream_t make() {
    stream_t s = nullptr;
    EXPECT_TRUE(sim->stream_create(0, &s).ok());
    return s;
  }
};

TEST(capture_sequence, AnActiveStreamIsInTheSequenceByItsId) {
  sequence_env env;
  const stream_t origin = env.make();
  const stream_t side = env.make();
  const stream_t other = env.make();
  capture::capture_sequence seq(*env.sim, origin);
  env.sim->set_capture(origin, capture_status::active, 7);
  EXPECT_FALSE(seq.accepts(origin)) << "id 0 (not begun yet) matches nothing";
  seq.set_id(7);
  env.sim->set_capture(side, capture_status::active, 7);
  env.sim->set_capture(other, capture_status::active, 8);
  EXPECT_TRUE(seq.accepts(origin));
  EXPECT_TRUE(seq.accepts(side));
  EXPECT_FALSE(seq.accepts(other)) << "another capture";
  ASSERT_EQ(seq.side_streams().size(), 1u);
  EXPECT_EQ(seq.side_streams()[0], side);
  env.sim->set_capture(origin, capture_status::none, 0);
  EXPECT_FALSE(seq.accepts(origin)) << "the capture ended";
  EXPECT_FALSE(seq.accepts(reinterpret_cast<stream_t>(0x77))) << "a stream the driver does not know";
}

TEST(capture_sequence, OnceInvalidatedItKeepsTheStreamsItSaw) {
  sequence_env env;
  const stream_t origin = env.make();
  const stream_t side = env.make();
  const stream_t unseen = env.make();
  const stream_t other = env.make();
  capture::capture_sequence seq(*env.sim, origin, 7);
  for (const stream_t s : {origin, side, unseen}) env.sim->set_capture(s, capture_status::active, 7);
  env.sim->set_capture(other, capture_status::active, 8);
  EXPECT_TRUE(seq.accepts(side));
  EXPECT_FALSE(seq.accepts(other));
  for (const stream_t s : {origin, side, unseen, other}) env.sim->set_capture(s, capture_status::invalidated, 0);
  capture_info info;
  ASSERT_TRUE(env.sim->stream_capture_info(origin, &info).ok());
  ASSERT_EQ(info.id, 0u) << "no id once invalidated, as CUDA";
  EXPECT_TRUE(seq.accepts(origin));
  EXPECT_TRUE(seq.accepts(side)) << "accepted while active";
  EXPECT_FALSE(seq.accepts(unseen)) << "never allocated while active: nothing says it is ours";
  EXPECT_FALSE(seq.accepts(other)) << "another capture's invalidated stream";
}

TEST(capture_sequence, ACaptureFirstSeenInvalidatedIsItsOriginStream) {
  sequence_env env;
  const stream_t origin = env.make();
  const stream_t other = env.make();
  capture::capture_sequence seq(*env.sim, origin, 0);
  env.sim->set_capture(origin, capture_status::invalidated, 5);
  env.sim->set_capture(other, capture_status::invalidated, 6);
  EXPECT_TRUE(seq.accepts(origin));
  EXPECT_FALSE(seq.accepts(other));
  env.sim->set_capture(origin, capture_status::active, 9);
  EXPECT_FALSE(seq.accepts(origin)) << "a new capture on the stream is another sequence";
}

}  // namespace
}  // namespace streampool::testing
