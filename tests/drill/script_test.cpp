// The drill's script language (tools/drill/script.hpp): what it reads, and the errors it gives,
// each naming the file, the line and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "tools/drill/script.hpp"

using namespace uroce::drill;

namespace {

const char* kHead =
    "title t\n"
    "rule r\n"
    "chapter psn\n"
    "qp rc mtu=1024 min_rnr=14\n"
    "mr buf len=4096 access=lw,rw\n";

std::string error_of(const std::string& body) {
  Scenario sc;
  std::string err;
  EXPECT_FALSE(parse_scenario("x.drill", kHead + body, sc, err)) << body;
  return err;
}

}  // namespace

TEST(DrillScript, ReadsAScenario) {
  Scenario sc;
  std::string err;
  ASSERT_TRUE(parse_scenario("dir/gap.drill",
                             std::string(kHead) +
                                 "peer recv buf off=0 len=64 wr=1  # a comment\n"
                                 "send SEND_ONLY psn=+1 len=64\n"
                                 "expect ACKNOWLEDGE psn=+0 syndrome=NAK_PSN_SEQ_ERR within=20ms\n"
                                 "nothing within=1s\n"
                                 "peer post write mr=buf len=8 rva=0x10 rkey=7\n"
                                 "peer expect wc wr=1 status=SUCCESS\n"
                                 "peer expect state=ERR\n"
                                 "peer expect mem buf off=0 len=4 data=00112233\n",
                             sc, err))
      << err;
  EXPECT_EQ(sc.name, "psn/gap");
  EXPECT_EQ(sc.mtu, 1024u);
  ASSERT_EQ(sc.mrs.size(), 1u);
  EXPECT_EQ(sc.mrs[0].access, "lw,rw");
  ASSERT_EQ(sc.steps.size(), 8u);
  EXPECT_EQ(sc.steps[0].kind, StepKind::Peer);
  EXPECT_EQ(sc.steps[0].text, "peer recv buf off=0 len=64 wr=1");  // without the comment
  EXPECT_EQ(sc.steps[1].opcode, 0x04);                              // RC_SEND_ONLY
  EXPECT_EQ(sc.steps[1].line, 7);
  EXPECT_EQ(sc.steps[2].opcode, 0x11);
  EXPECT_EQ(sc.steps[2].within_us, 20'000u);
  EXPECT_EQ(sc.steps[2].find("within"), nullptr);  // taken out of the fields
  EXPECT_EQ(sc.steps[3].within_us, 1'000'000u);
  EXPECT_EQ(sc.steps[4].fields[0].value, "write");  // the operation, a bare word
  EXPECT_EQ(sc.steps[6].kind, StepKind::PeerState);
  EXPECT_EQ(sc.steps[7].kind, StepKind::PeerMem);
}

TEST(DrillScript, OpcodesByName) {
  uint8_t op = 0;
  EXPECT_TRUE(opcode_by_name("uc", "SEND_ONLY", op));
  EXPECT_EQ(op, 0x24);
  EXPECT_TRUE(opcode_by_name("ud", "SEND_ONLY_WITH_IMMEDIATE", op));
  EXPECT_EQ(op, 0x65);
  EXPECT_TRUE(opcode_by_name("uc", "ACKNOWLEDGE", op));  // RC's, for any QP type
  EXPECT_EQ(op, 0x11);
  EXPECT_TRUE(opcode_by_name("rc", "CNP", op));
  EXPECT_EQ(op, 0x81);
  EXPECT_TRUE(opcode_by_name("rc", "0x15", op));
  EXPECT_EQ(op, 0x15);
  EXPECT_FALSE(opcode_by_name("rc", "SEND_SOMETIMES", op));
}

TEST(DrillScript, ErrorsNameTheLineAndTheField) {
  EXPECT_EQ(error_of("send SEND_ONLY psn=+x\n"), "x.drill:6: field 'psn': '+x' is not a PSN offset (+N, -N or N)");
  EXPECT_EQ(error_of("send SEND_ONLY imm=5\n"), "x.drill:6: field 'imm': RC_SEND_ONLY carries no ImmDt for it");
  EXPECT_EQ(error_of("send RDMA_READ_REQUEST len=5\n"),
            "x.drill:6: field 'len': RC_RDMA_READ_REQUEST carries no payload");
  EXPECT_EQ(error_of("send RDMA_WRITE_ONLY va=bof\n"),
            "x.drill:6: field 'va': 'bof' is neither a number nor a declared mr");
  EXPECT_EQ(error_of("expect ACKNOWLEDGE syndrome=NAK_MAYBE\n").substr(0, 52),
            "x.drill:6: field 'syndrome': 'NAK_MAYBE' is not a sy");
  EXPECT_EQ(error_of("send SEND_ONLY colour=red\n"), "x.drill:6: field 'colour': unknown field");
  EXPECT_EQ(error_of("send SEND_ONLY within=1s\n"), "x.drill:6: field 'within': unknown field");  // expect only
  EXPECT_EQ(error_of("expect ACKNOWLEDGE within=soon\n"),
            "x.drill:6: field 'within': 'soon' is not a time (200ms, 1s, 500us)");
  EXPECT_EQ(error_of("send SEND_ONLY psn=1 psn=2\n"), "x.drill:6: field 'psn' given twice");
  EXPECT_EQ(error_of("send ACKNOWLEDGE syndrome=RNR_NAK\n"),
            "x.drill:6: field 'syndrome': RNR_NAK to send needs rnr_timer=");
  EXPECT_EQ(error_of("peer recv nomr len=4\n"), "x.drill:6: 'nomr' is not a declared mr");
  EXPECT_EQ(error_of("peer dance\n").substr(0, 30), "x.drill:6: 'peer dance': not a");
  EXPECT_EQ(error_of("\n\nfly away\n").substr(0, 25), "x.drill:8: 'fly': not a s");
  EXPECT_EQ(error_of("send SEND_SOMETIMES\n").substr(0, 42), "x.drill:6: opcode 'SEND_SOMETIMES': no suc");
}

TEST(DrillScript, ASetUpIsNeeded) {
  Scenario sc;
  std::string err;
  EXPECT_FALSE(parse_scenario("y.drill", "send SEND_ONLY\n", sc, err));
  EXPECT_EQ(err, "y.drill: a scenario needs title, rule and chapter");
  EXPECT_FALSE(parse_scenario("y.drill", kHead, sc, err));
  EXPECT_EQ(err, "y.drill: no steps");
  EXPECT_FALSE(parse_scenario("y.drill", std::string(kHead) + "qp xrc\n", sc, err));
  EXPECT_EQ(err, "y.drill:6: 'qp' needs a type: rc, uc or ud");
  EXPECT_FALSE(parse_scenario("y.drill", std::string(kHead) + "qp rc mtu=1000\n", sc, err));
  EXPECT_EQ(err, "y.drill:6: field 'mtu': 1000 is not a path MTU (256, 512, 1024, 2048, 4096)");
}

// Every scenario of the library reads, names the spec rule it checks, and the library holds at
// least 60 (the floor).
TEST(DrillScript, TheLibraryReads) {
  const char* dir = std::getenv("UROCE_DRILL_SCENARIOS");  // tests/drill/meson.build sets it
  ASSERT_NE(dir, nullptr);
  size_t n = 0;
  std::set<std::string> chapters;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().extension() != ".drill") continue;
    Scenario sc;
    std::string err;
    EXPECT_TRUE(load_scenario(e.path().string(), sc, err)) << err;
    EXPECT_TRUE(sc.rule.rfind("IBA ", 0) == 0 || sc.rule.rfind("RoCEv2 ", 0) == 0) << sc.path << ": " << sc.rule;
    chapters.insert(sc.chapter);
    ++n;
  }
  EXPECT_GE(n, 60u);
  EXPECT_GE(chapters.size(), 12u);
}
