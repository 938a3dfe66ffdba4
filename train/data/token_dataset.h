// Language-model data as nanoGPT and llm.c keep it: `--data tokens:TRAIN.bin[,VAL.bin]`,
// flat files of token ids (uint16 by default, uint32 or int32 with --token-dtype; llm.c's
// 1024-byte header, magic 20240520, is recognised and sets the type), memory-mapped
// read-only and never copied whole. Each sample is a window of --seq-len T tokens: the
// model's input x = tokens[o : o+T] and the labels y = tokens[o+1 : o+T+1] (the next token
// of each position). Training windows start at random offsets o, drawn from (seed, epoch,
// sample index), so the sampler's checkpointed state (epoch, position) resumes the same
// sequence; an epoch is (len - 1) / T samples. Validation windows are consecutive and do not
// overlap: o = i * T. Without VAL.bin the last --val-fraction of TRAIN.bin is held out.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "graph/ir.h"
#include "train/data/image_dataset.h"

namespace ot {

// A token file mapped read-only.
class TokenFile {
 public:
  // dtype is kUInt16, kUInt32 or kInt32 (raw files; a file with llm.c's header takes the
  // header's type). Throws ot::Error naming the file for a missing or empty file, a size
  // that is not a whole number of tokens, or a header whose count disagrees with the size.
  static std::shared_ptr<const TokenFile> Open(const std::string& path, DType dtype);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }  // tokens
  DType dtype() const { return dtype_; }
  int header_version() const { return version_; }  // llm.c's header version; 0: a raw file
  int64_t At(int64_t i) const;                      // token i as int64 (no bounds check)

 private:
  TokenFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* tokens_ = nullptr;
  int64_t count_ = 0;
  DType dtype_ = DType::kUInt16;
  int version_ = 0;
};

// "uint16", "uint32" or "int32"; throws naming --token-dtype otherwise.
DType ParseTokenDType(const std::string& name);

// How windows are cut from a range [begin, end) of a token file.
struct TokenWindowOptions {
  int64_t seq_len = 0;
  int64_t begin = 0, end = -1;  // end -1: the file's end
  bool random = true;           // random offsets (training) or consecutive windows (validation)
  uint64_t seed = 0;
  DType input_type = DType::kInt64;  // the model's input: int64 or int32 token ids
  int64_t vocabulary = 0;            // > 0: ids must be below it (the embedding's rows)
  std::string vocabulary_source;     // what the limit comes from, for the error
};

// Windows of a token file as a SampleSource: Inputs are x [n, T], Labels y [n, T] (int64).
class TokenWindowSource : public SampleSource {
 public:
  // Throws ot::Error naming the file when the range holds fewer than seq_len + 1 tokens.
  TokenWindowSource(std::shared_ptr<const TokenFile> file, const TokenWindowOptions& options);
  std::vector<int64_t> SampleDims() const override { return {o_.seq_len}; }
  DType InputType() const override { return o_.input_type; }
  HostTensor Inputs(const std::vector<int64_t>& indices, const AugmentOptions* augment, int64_t epoch,
                    int64_t batch_index) const override;
  bool MakesLabels() const override { return true; }
  HostTensor Labels(const std::vector<int64_t>& indices, int64_t epoch) const override;

  // Samples: (end - begin - 1) / seq_len.
  int64_t Count() const { return count_; }
  // Where sample `index` of `epoch` starts in the file.
  int64_t Offset(int64_t index, int64_t epoch) const;

 private:
  HostTensor Window(const std::vector<int64_t>& indices, int64_t epoch, int64_t shift, DType type,
                    const char* name) const;
  std::shared_ptr<const TokenFile> file_;
  TokenWindowOptions o_;
  int64_t count_ = 0;
};

// `rest` is what follows "tokens:". options.token_seq_len must be set (DataSourceForModel
// takes it from the model's input when static); options.model_input gives the id type.
ImageDataset LoadTokenDataset(const std::string& rest, const std::string& split, const DataSourceOptions& options);

}  // namespace ot
