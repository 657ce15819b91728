// Reads a file from tests/fixtures/proc (path baked in by CMake).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace gpureap::proc::test {

inline std::string fixture_path(const std::string& name) { return std::string(GPUREAP_PROC_FIXTURES) + "/" + name; }

inline std::string fixture(const std::string& name) {
  std::ifstream in(fixture_path(name), std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace gpureap::proc::test
