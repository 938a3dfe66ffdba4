// The training loop: epochs of steps over a data set with a TrainingSession, learning-rate
// schedule, evaluation, checkpoints and exact resume. `onnx-train MODEL.onnx` runs it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/rendezvous.h"
#include "graph/passes/amp_pass.h"
#include "train/amp/loss_scaler.h"
#include "graph/ir.h"
#include "graph/passes/optimizer_pass.h"
#include "runtime/core/device.h"
#include "runtime/executor/executor.h"
#include "train/data/image_dataset.h"
#include "train/recipe/lr_schedule.h"
#include "train/step_observer.h"

namespace ot {

struct TrainerOptions {
  std::string data = "fashion-mnist";  // data spec (see LoadImageDataset)
  int epochs = 5;
  int64_t batch = 32;
  // Micro-batches of `batch` per optimizer step (gradients averaged: accumulate A at batch
  // B trains as batch A*B); data-parallel ranks allreduce only at each step's last.
  int64_t accumulate = 1;
  LrSchedule schedule;
  OptimizerConfig optimizer;
  // Initializer names or glob patterns that stay fixed (--freeze); when train_only is not
  // empty, only initializers matching it train (--train-only). See graph/passes/param_patterns.h.
  std::vector<std::string> freeze;
  std::vector<std::string> train_only;
  bool shuffle = true;
  bool augment = false;
  float label_smoothing = 0.f;  // --label-smoothing: PyTorch's CrossEntropyLoss(label_smoothing=)
  LossKind loss = LossKind::kAuto;  // --loss (graph/autodiff/autodiff.h)
  int64_t ignore_index = -100;      // --ignore-index: cross-entropy and nll
  float smooth_l1_beta = 1.f;       // --smooth-l1-beta
  float random_erase = 0.f;     // --random-erase: probability of torchvision's RandomErasing per image
  // --model-ema: an EMA of the weights and BatchNorm statistics (train/recipe/model_ema.h), evaluated,
  // checkpointed and exported beside the model. The decay is adjusted as torchvision's.
  double mixup_alpha = 0;   // --mixup-alpha: torchvision's RandomMixup (train/recipe/mix_batch.h)
  double cutmix_alpha = 0;  // --cutmix-alpha: torchvision's RandomCutmix
  bool model_ema = false;
  int64_t model_ema_steps = 32;
  double model_ema_decay = 0.99998;
  int model_ema_warmup_epochs = 0;  // epochs whose EMA updates copy the model (torchvision: --lr-warmup-epochs)
  uint64_t seed = 0;
  int eval_every = 0;  // epochs; 0: only at the end
  int save_every = 0;  // epochs; 0: only at the end
  int64_t snapshot_every = 0;  // steps; 0: no recovery snapshots between epoch checkpoints
  int keep_snapshots = 2;
  std::string checkpoint_dir = "trained_models";
  bool save_checkpoints = true;
  std::string resume;  // "": fresh start; "latest": newest valid checkpoint in checkpoint_dir; else a path
  std::string metrics_path;
  int threads = 0;
  Device device;
  bool cuda_graphs = false;  // CUDA: replay steps as CUDA graphs (ExecutorOptions::cuda_graphs)
  // The executors' options the entry point chose (--conv-algo, the environment's profiling,
  // serial threshold and channel block); the trainer sets the device, threads, seed,
  // cuda_graphs and cross_replica on top.
  ExecutorOptions executor;
  // --amp bf16 (TrainingConfig::amp); the entry point has checked that the CPU has bfloat16.
  AmpMode amp = AmpMode::kOff;
  // --loss-scale (TrainingConfig::loss_scale): dynamic by default under --amp fp16.
  LossScaleOptions loss_scale;
  int64_t max_steps_per_epoch = -1;  // for tests and quick looks; -1: the whole epoch
  bool quiet = false;                // no per-step output (epoch lines still print)
  // Data parallel (rank and world size come from the launcher's environment).
  std::string backend = "auto";       // communicator backend
  double comm_timeout_seconds = 300;  // a collective (or joining) taking longer is an error
  double bucket_cap_mb = 25;          // gradient allreduce bucket size (the first is 1 MiB), like DDP's
  bool lr_scale_world = false;        // multiply the learning rate by the world size
  // --sync-bn: BatchNormalization statistics and gradients over all ranks' batches (a note
  // and no effect with one rank; CPU only).
  bool sync_bn = false;
  // This process's place in a data-parallel run (rank, world size, rendezvous store), as the
  // entry point read it from the launcher's environment and --rdzv; a default LaunchInfo
  // (no launcher) trains alone.
  LaunchInfo launch;
  // The command that continues this run, without --resume (for the message an
  // interrupted run prints); "" makes it "onnx-train MODEL.onnx ...".
  std::string continue_command;
  // > 0: the model only runs batches of exactly this size (a fixed-batch export): epochs
  // leave out a last partial batch, evaluation pads its last batch.
  int64_t fixed_batch = 0;
  // Real data: transforms, decode threads (0: from the thread budget), held-out share,
  // .npz names, bad images (model_input, model_classes and seed are set by the trainer).
  DataSourceOptions data_source;
  std::string headline;  // printed by rank 0 after what loading the data did (the first lines)
  // What the entry point read from its environment (the trainer reads none): the address
  // this rank's connections listen on (--bind-addr), whether a launcher already prefixes
  // every output line with the rank and whether it writes to a terminal.
  std::string bind_addr;
  bool output_prefixed = false;
  bool output_is_terminal = false;
  // Called after every optimizer step (the launcher's heartbeat, fault injection).
  std::vector<std::shared_ptr<StepObserver>> observers;
};

struct TrainResult {
  int epochs_run = 0;   // epochs trained by this call
  int epochs_done = 0;  // epochs done in the whole run (a resumed run counts the earlier ones)
  bool already_complete = false;  // resumed from a checkpoint of the last epoch: nothing trained
  int64_t global_step = 0;
  double last_epoch_loss = 0;
  double test_accuracy = -1;
  double ema_test_accuracy = -1;  // --model-ema: the averaged weights' test accuracy
  // Language models (per-token labels): the validation cross-entropy per token (its
  // perplexity is exp of it; test_accuracy is then per token); < 0 when not evaluated.
  double test_loss = -1;
  // Float targets: test MAE and RMSE (mse, l1, smooth-l1), exact match and mean F1
  // (bce-with-logits); < 0 when they do not apply.
  double test_mae = -1, test_rmse = -1, test_exact_match = -1, test_f1 = -1;
  double test_miou = -1;  // segmentation: the test split's mean IoU
  std::vector<double> step_losses;  // every step's loss, in order
  std::string last_checkpoint;      // stem of the last checkpoint written ("" if none)
  int world_size = 1;
  double allreduce_wait_seconds = 0;  // time steps spent blocked on gradient allreduce
  bool interrupted = false;           // stopped early by SIGINT/SIGTERM (state saved as it said)
};

// Trains `forward` as the options say. A SIGINT or SIGTERM during the run ends it after
// the current step with a recovery snapshot (all ranks stop at the same step) and
// `interrupted` set; a second one ends the process at once (see train/checkpoint/interrupt.h).
// Throws ot::Error for bad input (data that does not fit the model, an unwritable
// checkpoint folder, a checkpoint of another model, ...).
// `forward` is taken by value: pass it with std::move where the caller needs it no more,
// and the run keeps no second copy of its weights.
TrainResult RunTraining(Model forward, const TrainerOptions& options);

}  // namespace ot
