// The main of a family's test runner: the C++ test files of one family (tests/unit, tests/data,
// ...) link into one GoogleTest program with this main instead of one program each.
//
//   RUNNER                      every case of every file, one line a case, exit 1 on a failure
//   RUNNER --file=graph_test    the cases of graph_test.cc only (how CTest runs each file: one
//                               entry per file, named after it, as when each file was a program)
//   RUNNER --list-files         the files linked in, one a line
//
// GoogleTest's own flags (--gtest_filter, --gtest_repeat, ...) work as ever; --file with
// --gtest_filter is refused, since the file is itself a filter (name the cases instead).
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

// "tests/unit/graph/graph_test.cc" -> "graph_test".
std::string FileStem(const char* path) {
  std::string s = path ? path : "";
  const size_t slash = s.find_last_of('/');
  if (slash != std::string::npos) s = s.substr(slash + 1);
  const size_t dot = s.find('.');
  return dot == std::string::npos ? s : s.substr(0, dot);
}

// Every registered case's full name ("Suite.Case", "Prefix/Suite.Case/Param") by file stem.
std::map<std::string, std::vector<std::string>> CasesByFile() {
  std::map<std::string, std::vector<std::string>> cases;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(j);
      cases[FileStem(info.file())].push_back(std::string(suite.name()) + "." + info.name());
    }
  }
  return cases;
}

// The GoogleTest filter that selects exactly the cases of `file`; empty (and a message on
// stderr) when the file is not linked in or shares a case name with another file.
std::string FilterForFile(const std::string& file) {
  const auto cases = CasesByFile();
  const auto mine = cases.find(file);
  if (mine == cases.end()) {
    std::fprintf(stderr, "test runner: no test file '%s' in this runner; --list-files names them\n", file.c_str());
    return "";
  }
  if (cases.size() == 1) return "*";
  std::set<std::string> others;
  for (const auto& [stem, names] : cases) {
    if (stem != file) others.insert(names.begin(), names.end());
  }
  std::string filter;
  for (const std::string& name : mine->second) {
    if (others.count(name)) {
      std::fprintf(stderr, "test runner: the case %s is defined in %s.cc and in another file of this runner; "
                   "rename one so that --file can tell them apart\n", name.c_str(), file.c_str());
      return "";
    }
    filter += (filter.empty() ? "" : ":") + name;
  }
  return filter;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);  // takes the --gtest_* flags out of argv
  std::string file;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strncmp(arg, "--file=", 7) == 0) {
      file = arg + 7;
    } else if (std::strcmp(arg, "--list-files") == 0) {
      for (const auto& entry : CasesByFile()) std::printf("%s\n", entry.first.c_str());
      return 0;
    } else {
      std::fprintf(stderr, "test runner: unknown argument '%s' (--file=NAME, --list-files, --gtest_*)\n", arg);
      return 2;
    }
  }
  if (!file.empty()) {
    if (GTEST_FLAG_GET(filter) != "*") {
      std::fprintf(stderr, "test runner: give --file or --gtest_filter, not both\n");
      return 2;
    }
    const std::string filter = FilterForFile(file);
    if (filter.empty()) return 2;
    GTEST_FLAG_SET(filter, filter);
  }
  return RUN_ALL_TESTS();
}
