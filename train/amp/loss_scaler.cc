// LossScaler: GradScaler's update rule on the host.
#include "train/amp/loss_scaler.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "graph/error.h"

namespace ot {

namespace {

float ParseScale(const std::string& text, const std::string& whole) {
  char* end = nullptr;
  const double v = text.empty() ? std::nan("") : std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v <= 0 || !std::isfinite(static_cast<float>(v)) ||
      static_cast<float>(v) <= 0.f)
    throw Error("--loss-scale '" + whole + "': the scale must be a positive finite number (float32), as in " +
                "static:1024 or dynamic:65536");
  return static_cast<float>(v);
}

}  // namespace

LossScaleOptions ParseLossScale(const std::string& text) {
  LossScaleOptions o;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const std::string value = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (kind == "none" && colon == std::string::npos) {
    o.kind = LossScaleOptions::Kind::kNone;
  } else if (kind == "dynamic") {
    o.kind = LossScaleOptions::Kind::kDynamic;
    if (colon != std::string::npos) o.initial = ParseScale(value, text);
  } else if (kind == "static" && colon != std::string::npos) {
    o.kind = LossScaleOptions::Kind::kStatic;
    o.initial = ParseScale(value, text);
  } else {
    throw Error("--loss-scale takes dynamic, dynamic:S0 (initial scale), static:S or none, got '" + text + "'");
  }
  return o;
}

std::string LossScaleName(const LossScaleOptions& o) {
  char scale[40];
  std::snprintf(scale, sizeof scale, "%g", static_cast<double>(o.initial));
  switch (o.kind) {
    case LossScaleOptions::Kind::kDynamic: return std::string("dynamic:") + scale;
    case LossScaleOptions::Kind::kStatic: return std::string("static:") + scale;
    default: return "none";
  }
}

LossScaler::LossScaler(const LossScaleOptions& o)
    : enabled_(o.kind == LossScaleOptions::Kind::kStatic || o.kind == LossScaleOptions::Kind::kDynamic),
      dynamic_(o.kind == LossScaleOptions::Kind::kDynamic),
      scale_(enabled_ ? o.initial : 1.f),
      growth_factor_(o.growth_factor),
      backoff_factor_(o.backoff_factor),
      growth_interval_(o.growth_interval) {}

bool LossScaler::Update(bool finite) {
  if (!enabled_) return true;
  if (!finite) {
    ++skipped_;
    if (dynamic_) {
      scale_ *= backoff_factor_;
      growth_tracker_ = 0;
    }
    return false;
  }
  if (!dynamic_) return true;
  // torch's _amp_update_scale_: the successful step that reaches the interval grows the
  // scale (unless that would overflow float32) and restarts the count.
  const int64_t successful = growth_tracker_ + 1;
  if (successful == growth_interval_) {
    const float grown = scale_ * growth_factor_;
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    growth_tracker_ = successful;
  }
  return true;
}

std::string LossScaler::Save() const {
  uint32_t bits = 0;
  std::memcpy(&bits, &scale_, sizeof bits);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%08x %lld %lld", bits, static_cast<long long>(growth_tracker_),
                static_cast<long long>(skipped_));
  return buf;
}

void LossScaler::Load(const std::string& text) {
  unsigned bits = 0;
  long long tracker = 0, skipped = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "%8x %lld %lld%n", &bits, &tracker, &skipped, &used) != 3 ||
      static_cast<size_t>(used) != text.size() || tracker < 0 || skipped < 0)
    throw Error("loss scale state '" + text + "' is not 'SCALE_BITS GROWTH_TRACKER SKIPPED'");
  const uint32_t b = bits;
  std::memcpy(&scale_, &b, sizeof scale_);
  growth_tracker_ = tracker;
  skipped_ = skipped;
}

}  // namespace ot
