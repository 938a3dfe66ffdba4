// Progress output and metrics.
#include "train/progress.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "graph/error.h"

namespace ot {

namespace {
double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
std::string Clock(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  return s >= 3600 ? StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60) : StrFormat("%d:%02d", s / 60, s % 60);
}
}  // namespace

void AppendJsonField(std::string* out, const char* key, double value, int digits, bool fixed, bool first) {
  char buf[400];  // a double in fixed notation has at most 309 digits before the point
  char* p = buf;
  if (!first) *p++ = ',';
  *p++ = '"';
  for (const char* k = key; *k && p < buf + 48; ++k) *p++ = *k;
  *p++ = '"';
  *p++ = ':';
  const std::to_chars_result r = std::isfinite(value)
      ? std::to_chars(p, buf + sizeof(buf), value, fixed ? std::chars_format::fixed : std::chars_format::general, digits)
      : std::to_chars_result{p, std::errc()};
  if (r.ec != std::errc() || !std::isfinite(value)) {  // JSON has no inf or nan: null
    out->append(buf, static_cast<size_t>(p - buf)).append("null");
    return;
  }
  out->append(buf, static_cast<size_t>(r.ptr - buf));
}

void AppendJsonField(std::string* out, const char* key, int64_t value, bool first) {
  char buf[80];
  char* p = buf;
  if (!first) *p++ = ',';
  *p++ = '"';
  for (const char* k = key; *k && p < buf + 48; ++k) *p++ = *k;
  *p++ = '"';
  *p++ = ':';
  p = std::to_chars(p, buf + sizeof(buf), value).ptr;
  out->append(buf, static_cast<size_t>(p - buf));
}

ProgressReporter::ProgressReporter(std::string tag, const std::string& metrics_path, bool quiet,
                                   bool output_is_terminal)
    : tag_(std::move(tag)),
      tty_(::isatty(STDOUT_FILENO) != 0 || output_is_terminal),
      quiet_(quiet) {
  if (!tag_.empty()) tag_ = "[" + tag_ + "] ";
  if (!metrics_path.empty()) {
    metrics_ = std::make_unique<std::ofstream>(metrics_path, std::ios::app);
    OT_CHECK(metrics_->good(), "cannot open the metrics file '%s' for writing", metrics_path.c_str());
  }
  run_start_ = last_flush_ = std::chrono::steady_clock::now();
}

ProgressReporter::~ProgressReporter() = default;

void ProgressReporter::StartEpoch(int epoch, int64_t steps, double lr) {
  epoch_ = epoch;
  steps_ = steps;
  lr_ = lr;
  images_ = 0;
  epoch_start_ = last_print_ = last_step_ = std::chrono::steady_clock::now();
}

void ProgressReporter::Step(int64_t step, int64_t global_step, double step_loss, double running_loss,
                            int64_t images, const std::string& extra_json) {
  images_ += images;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - epoch_start_).count();
  // The loop's wall time per step: since the previous step's record (the epoch's start for
  // its first step): the step, making its batch, scoring and reporting, all together.
  const double loop_ms = 1e3 * std::chrono::duration<double>(now - last_step_).count();
  last_step_ = now;
  if (metrics_) {
    line_.assign("{\"type\":\"step\"");
    AppendJsonField(&line_, "epoch", int64_t{epoch_});
    AppendJsonField(&line_, "step", step);
    AppendJsonField(&line_, "global_step", global_step);
    AppendJsonField(&line_, "loss", step_loss, 6, false);
    AppendJsonField(&line_, "lr", lr_, 6, false);
    AppendJsonField(&line_, "img_per_s", elapsed > 0 ? static_cast<double>(images_ * world_size_) / elapsed : 0.0, 1,
                    true);
    AppendJsonField(&line_, "time", std::chrono::duration<double>(now - run_start_).count(), 3, true);
    AppendJsonField(&line_, "loop_ms", loop_ms, 3, true);
    line_ += extra_json;
    line_ += "}\n";
    metrics_->write(line_.data(), static_cast<std::streamsize>(line_.size()));
    // Written out every quarter second, and whenever the run saves its state (FlushMetrics):
    // a worker killed without warning loses at most the lines of steps after its last saved
    // state, which its resumed run trains and records again.
    if (std::chrono::duration<double>(now - last_flush_).count() >= 0.25) FlushMetrics();
  }
  if (quiet_) return;
  const bool last = step + 1 == steps_;
  const double since_print = std::chrono::duration<double>(now - last_print_).count();
  if (tty_ ? (since_print >= 0.2 || last) : (since_print >= 10.0 && !last)) {
    Bar(step, running_loss);
    last_print_ = std::chrono::steady_clock::now();
  }
}

void ProgressReporter::Bar(int64_t step, double running_loss) {
  const double elapsed = Since(epoch_start_);
  const double rate = elapsed > 0 ? static_cast<double>(images_ * world_size_) / elapsed : 0;  // the job's
  const double per_step = elapsed / static_cast<double>(step + 1);
  const double eta = per_step * static_cast<double>(steps_ - step - 1);
  if (tty_) {
    const int width = 24;
    const int filled = static_cast<int>(width * (step + 1) / std::max<int64_t>(steps_, 1));
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < width) bar += '>';
    bar.resize(width, ' ');
    std::printf("\r%sEpoch %d [%s] %lld/%lld | loss %.4f | %.0f img/s | ETA %s\033[K", tag_.c_str(), epoch_,
                bar.c_str(), (long long)(step + 1), (long long)steps_, running_loss, rate, Clock(eta).c_str());
    bar_shown_ = true;
  } else {
    std::printf("%sEpoch %d step %lld/%lld | loss %.4f | %.0f img/s | ETA %s\n", tag_.c_str(), epoch_,
                (long long)(step + 1), (long long)steps_, running_loss, rate, Clock(eta).c_str());
  }
  std::fflush(stdout);
}

void ProgressReporter::EndEpoch(const EpochSummary& s) {
  const std::string batch = s.world_size > 1 ? StrFormat("%lld per rank (%lld global)", (long long)s.batch,
                                                        (long long)s.batch * s.world_size)
                                              : std::to_string(s.batch);
  std::string line = StrFormat("%sEpoch %d | Batchsize: %s | Steps: %lld | LR: %.4g | Loss: %.4f", tag_.c_str(),
                               s.epoch, batch.c_str(), (long long)s.steps, s.lr, s.loss);
  if (s.perplexity >= 0) line += StrFormat(" | PPL: %.3f", s.perplexity);
  const char* per = s.miou >= 0 ? "Pixel acc" : "Acc";  // segmentation: per pixel
  if (s.accuracy >= 0) line += StrFormat(" | %s: %.2f%%", per, 100.0 * s.accuracy);
  if (s.miou >= 0) line += StrFormat(" | mIoU: %.4f", s.miou);
  if (s.test_loss >= 0 && s.miou >= 0) line += StrFormat(" | Test loss: %.4f", s.test_loss);  // per pixel
  else if (s.test_loss >= 0) line += StrFormat(" | Val loss: %.4f | Val PPL: %.3f", s.test_loss, std::exp(s.test_loss));
  if (s.test_accuracy >= 0) line += StrFormat(" | Test %s: %.2f%%", s.miou >= 0 ? "pixel acc" : "acc", 100.0 * s.test_accuracy);
  if (s.test_miou >= 0) line += StrFormat(" | Test mIoU: %.4f", s.test_miou);
  if (s.mae >= 0) line += StrFormat(" | MAE: %.4g | RMSE: %.4g", s.mae, s.rmse);
  if (s.exact_match >= 0) line += StrFormat(" | Exact: %.2f%% | F1: %.4f", 100.0 * s.exact_match, s.f1);
  if (s.test_mae >= 0) line += StrFormat(" | Test MAE: %.4g | Test RMSE: %.4g", s.test_mae, s.test_rmse);
  if (s.test_exact_match >= 0)
    line += StrFormat(" | Test exact: %.2f%% | Test F1: %.4f", 100.0 * s.test_exact_match, s.test_f1);
  line += StrFormat(" | %.0f img/s | %.1f s", s.images_per_second, s.seconds);
  Message(line);
  if (metrics_) {
    std::string json = StrFormat(
        "{\"type\":\"epoch\",\"epoch\":%d,\"steps\":%lld,\"batch\":%lld,\"lr\":%.6g,\"loss\":%.6g,\"acc\":%.6g,"
        "\"img_per_s\":%.1f,\"epoch_time\":%.3f,\"time\":%.3f",
        s.epoch, (long long)s.steps, (long long)s.batch, s.lr, s.loss, s.accuracy, s.images_per_second, s.seconds,
        Since(run_start_));
    if (s.perplexity >= 0) json += StrFormat(",\"ppl\":%.6g", s.perplexity);
    if (s.test_loss >= 0 && s.miou >= 0) json += StrFormat(",\"test_loss\":%.6g", s.test_loss);
    else if (s.test_loss >= 0) json += StrFormat(",\"val_loss\":%.6g,\"val_ppl\":%.6g", s.test_loss, std::exp(s.test_loss));
    if (s.test_accuracy >= 0) json += StrFormat(",\"test_acc\":%.6g", s.test_accuracy);
    if (s.miou >= 0) json += StrFormat(",\"miou\":%.6g", s.miou);
    if (s.test_miou >= 0) json += StrFormat(",\"test_miou\":%.6g", s.test_miou);
    if (s.mae >= 0) json += StrFormat(",\"mae\":%.6g,\"rmse\":%.6g", s.mae, s.rmse);
    if (s.exact_match >= 0) json += StrFormat(",\"exact_match\":%.6g,\"f1\":%.6g", s.exact_match, s.f1);
    if (s.test_mae >= 0) json += StrFormat(",\"test_mae\":%.6g,\"test_rmse\":%.6g", s.test_mae, s.test_rmse);
    if (s.test_exact_match >= 0)
      json += StrFormat(",\"test_exact_match\":%.6g,\"test_f1\":%.6g", s.test_exact_match, s.test_f1);
    WriteJson(json + "}");
  }
}

void ProgressReporter::Message(const std::string& line) {
  if (bar_shown_) {
    std::printf("\r\033[K");
    bar_shown_ = false;
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void ProgressReporter::WriteJson(const std::string& json) {
  *metrics_ << json << '\n';
  FlushMetrics();
}

void ProgressReporter::FlushMetrics() {
  if (!metrics_) return;
  metrics_->flush();
  last_flush_ = std::chrono::steady_clock::now();
}

}  // namespace ot
