// One kernel argument of a request (PROTOCOL.md, "args"): a buffer with its files, checks and
// fresh draws, or a scalar with its raw bytes. Part of parse_request (request.cpp).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "request.hpp"

namespace kernelopt::detail {

// Parses and validates cases[i].args[j] (`path`); throws BadRequest naming the field.
KernelArg parse_arg(const nlohmann::json& a, const std::string& path);

}  // namespace kernelopt::detail
