// What a training run tells its user: the per-epoch line the recipes' users know
//   [cpu0] Epoch 0 | Batchsize: 128 | Steps: 391 | LR: 0.1000 | Loss: 2.0430 | Acc: 25.20% | 812 img/s | 61.6 s
// a progress bar inside the epoch on a terminal (plain lines every few seconds
// otherwise), and, with --metrics FILE.jsonl, one JSON object per step and per epoch.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

namespace ot {

// Set by onnx-train's launcher for its workers: every output line gets a "[rank R] "
// prefix there, so the reporter adds no tag of its own; and whether the launcher writes to
// a terminal (its rank 0 then draws the progress bar, which the launcher relays).
constexpr const char* kEnvOutputPrefixed = "ONNXTRAIN_OUTPUT_PREFIXED";
constexpr const char* kEnvOutputIsTerminal = "ONNXTRAIN_OUTPUT_IS_TERMINAL";

struct EpochSummary {
  int epoch = 0;
  int64_t batch = 0;       // per rank
  int world_size = 1;      // ranks (the global batch is batch x world_size)
  int64_t steps = 0;
  double lr = 0;         // the rate of the epoch's last step
  double loss = 0;      // mean over the epoch's samples
  double accuracy = 0;  // training accuracy over the epoch, in [0, 1]; < 0 where it does not apply
  double images_per_second = 0;  // the whole job's
  double seconds = 0;
  double test_accuracy = -1;  // < 0 when not evaluated
  // Language models (per-token labels): the training perplexity exp(loss), and the
  // validation cross-entropy per token (the line shows it and its perplexity); < 0 when
  // they do not apply or were not evaluated.
  double perplexity = -1;
  double test_loss = -1;
  // Regression (mse, l1, smooth-l1): mean absolute error and root mean square error, training
  // and test; multi-label (bce-with-logits): exact-match accuracy and mean F1 over the labels.
  // < 0 when they do not apply or were not evaluated.
  double mae = -1, rmse = -1, test_mae = -1, test_rmse = -1;
  double exact_match = -1, f1 = -1, test_exact_match = -1, test_f1 = -1;
  // Segmentation (a class per pixel): mean IoU over the classes, training and test (the
  // accuracies above are then per pixel); < 0 when it does not apply.
  double miou = -1, test_miou = -1;
};

// `,"key":value` appended to `out` (no comma before the first field of an object: `first`),
// the value as printf's %.{digits}g (general) or %.{digits}f (fixed) would write it, by
// std::to_chars: a metrics line is written every step, and printf's conversion of a double
// costs about as much as a short step's tenth.
void AppendJsonField(std::string* out, const char* key, double value, int digits, bool fixed, bool first = false);
void AppendJsonField(std::string* out, const char* key, int64_t value, bool first = false);

class ProgressReporter {
 public:
  // tag: "cpu0", "cuda0", or "" for none; metrics_path: "" for none. Throws ot::Error if the metrics file
  // cannot be opened.
  // output_is_terminal: the output reaches a terminal through a launcher (draw the bar).
  ProgressReporter(std::string tag, const std::string& metrics_path, bool quiet, bool output_is_terminal = false);
  const std::string& tag() const { return tag_; }  // "[cpu0] ", or ""
  ~ProgressReporter();

  // Data parallel: the bar's img/s counts every rank's images (this rank's times N).
  void SetWorldSize(int world_size) { world_size_ = world_size; }
  void StartEpoch(int epoch, int64_t steps, double lr);
  // The learning rate of the next steps (a per-step schedule changes it within an epoch).
  void SetLr(double lr) { lr_ = lr; }
  // After each step: the running mean loss of the epoch so far and this step's figures.
  // extra_json: more fields for the metrics line (",\"step_ms\":12.5,..."), or empty.
  void Step(int64_t step_in_epoch, int64_t global_step, double step_loss, double running_loss, int64_t images,
            const std::string& extra_json = "");
  void EndEpoch(const EpochSummary& s);
  void Message(const std::string& line);  // a plain line (clears the bar first)
  // Writes the metrics lines out now. Step lines are written every quarter second; the
  // trainer flushes before it saves state, so that every step a resume will not train again
  // is on disk even if the process is then killed.
  void FlushMetrics();

 private:
  void Bar(int64_t step, double running_loss);
  void WriteJson(const std::string& json);

  std::string tag_;
  bool tty_ = false;
  bool quiet_ = false;
  std::unique_ptr<std::ofstream> metrics_;
  std::string line_;  // the step line being written (its capacity kept from step to step)
  int epoch_ = 0;
  int64_t steps_ = 0;
  double lr_ = 0;
  int64_t images_ = 0;
  std::chrono::steady_clock::time_point epoch_start_, last_print_, last_step_, run_start_, last_flush_;
  bool bar_shown_ = false;
  int world_size_ = 1;
};

}  // namespace ot
