// The daemons' shared command-line and config-file handling (c4/common/flags.h).
#include "c4/common/flags.h"

#include <gtest/gtest.h>

#include <set>

namespace c4::flags {
namespace {

const std::set<std::string, std::less<>> kNames = {"workers", "log-level", "dry-run"};
bool known(std::string_view n) {
  return kNames.contains(n);
}
bool boolean(std::string_view n) {
  return n == "dry-run";
}

TEST(FlagsTest, TokenizesBothFormsBooleansConfigHelpAndVersion) {
  auto cl = tokenize({"--workers=4", "--log-level", "debug", "--dry-run", "--config", "/etc/c.yaml",
                      "--help", "--version"},
                     known, boolean);
  ASSERT_TRUE(cl) << cl.error().toString();
  EXPECT_EQ(cl->flags, (KeyValues{{"workers", "4"}, {"log-level", "debug"}, {"dry-run", "true"}}));
  EXPECT_EQ(cl->config_file, "/etc/c.yaml");
  EXPECT_TRUE(cl->help);
  EXPECT_TRUE(cl->version);
  // "--dry-run false" takes the next word as its value; "-h" is help.
  cl = tokenize({"--dry-run", "false", "-h"}, known, boolean);
  ASSERT_TRUE(cl);
  EXPECT_EQ(cl->flags, (KeyValues{{"dry-run", "false"}}));
  EXPECT_TRUE(cl->help);
}

TEST(FlagsTest, RefusesUnknownFlagsMissingValuesAndStrayArguments) {
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  for (const Case& c :
       {Case{{"--bogus=1"}, "unknown flag --bogus"}, Case{{"--workers"}, "--workers needs a value"},
        Case{{"--workers", "--dry-run"}, "--workers needs a value"},
        Case{{"stray"}, "unexpected argument 'stray'"},
        Case{{"--dry-run"}, "--dry-run needs a value"}}) {
    // The last case: without a boolean predicate no flag may stand alone.
    auto cl = c.want == "--dry-run needs a value" ? tokenize(c.args, known)
                                                  : tokenize(c.args, known, boolean);
    ASSERT_FALSE(cl) << c.args[0];
    EXPECT_NE(cl.error().message.find(c.want), std::string::npos) << cl.error().message;
  }
}

TEST(FlagsTest, ConfigYamlIsAMapOfScalarsWithKnownKeys) {
  auto kv = parseConfigYaml("workers: 8\nlog-level: info\ndry-run: ~\n", known);
  ASSERT_TRUE(kv) << kv.error().toString();
  EXPECT_EQ(*kv, (KeyValues{{"workers", "8"}, {"log-level", "info"}, {"dry-run", ""}}));
  auto empty = parseConfigYaml("", known);
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  struct Case {
    const char* text;
    const char* want;
  };
  for (const Case& c :
       {Case{"bogus: 1\n", "config: unknown key 'bogus'"},
        Case{"workers: [1, 2]\n", "config: 'workers' must be a scalar"},
        Case{"- workers\n", "config: not a YAML map"}, Case{"workers: [1\n", "config: "}}) {
    auto r = parseConfigYaml(c.text, known);
    ASSERT_FALSE(r) << c.text;
    EXPECT_NE(r.error().message.find(c.want), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace c4::flags
