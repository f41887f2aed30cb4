// Text the dissector's views share: printf into a string, and the pieces of the --bytes layout
// (a named field, a byte of bit fields with its bits grouped field by field).
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>

namespace uroce::dissect {

// Text escaped for XML and HTML: & < > " as entities.
std::string xml(std::string_view s);

// printf into a std::string (at most 511 characters).
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));

// The bits of a byte, most significant first, a space between groups: bits(0xb0, {1, 1, 2, 4})
// is "1 0 11 0000".
std::string bits(unsigned v, std::initializer_list<unsigned> groups);

// "Name        = value": a field of the --bytes layout.
std::string named(const char* name, const std::string& value);

// A byte of several bit fields: the fields, then its bits grouped field by field.
std::string with_bits(const std::string& fields, const std::string& b);

}  // namespace uroce::dissect
