// Text the dissector's views share (text.hpp).
#include "tools/dissect/text.hpp"

#include <cstdarg>
#include <cstdio>

namespace uroce::dissect {

std::string xml(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string bits(unsigned v, std::initializer_list<unsigned> groups) {
  std::string s;
  int bit = 7;
  for (unsigned g : groups) {
    if (!s.empty()) s += ' ';
    for (unsigned i = 0; i < g; ++i, --bit) s += (v >> bit) & 1 ? '1' : '0';
  }
  return s;
}

std::string named(const char* name, const std::string& value) { return fmt("%-11s = %s", name, value.c_str()); }

std::string with_bits(const std::string& fields, const std::string& b) {
  return fmt("%-28s [%s]", fields.c_str(), b.c_str());
}

}  // namespace uroce::dissect
