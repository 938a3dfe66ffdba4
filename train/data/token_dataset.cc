// Token files (raw or with llm.c's header) mapped read-only, and the windows cut from them.
#include "train/data/token_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "graph/error.h"
#include "train/readers/data_random.h"

namespace ot {

namespace {

// llm.c's token files start with 256 int32: magic, version (1: uint16, 2: uint32), count.
constexpr int32_t kLlmcMagic = 20240520;
constexpr int64_t kLlmcHeaderBytes = 256 * 4;

// A stream name for the training offsets, apart from the other data streams of a seed.
constexpr uint64_t kOffsetStream = 0x70c3e5;

int32_t Int32At(const uint8_t* p, int64_t i) {
  int32_t v;
  std::memcpy(&v, p + i * 4, 4);
  return v;
}

}  // namespace

DType ParseTokenDType(const std::string& name) {
  if (name == "uint16") return DType::kUInt16;
  if (name == "uint32") return DType::kUInt32;
  if (name == "int32") return DType::kInt32;
  throw Error("--token-dtype '" + name + "' is not a token file type; use uint16 (nanoGPT's), uint32 or int32");
}

std::shared_ptr<const TokenFile> TokenFile::Open(const std::string& path, DType dtype) {
  OT_CHECK(dtype == DType::kUInt16 || dtype == DType::kUInt32 || dtype == DType::kInt32,
           "token file '%s': token type %s is not uint16, uint32 or int32", path.c_str(), DTypeName(dtype).c_str());
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OT_CHECK(fd >= 0, "cannot open the token file '%s' (%s); give the path of a flat token file such as nanoGPT's "
           "train.bin", path.c_str(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("the token file '" + path + "' is not a regular file; give the path of a flat token file");
  }
  const int64_t bytes = static_cast<int64_t>(st.st_size);
  if (bytes == 0) {
    ::close(fd);
    throw Error("the token file '" + path + "' is empty (0 bytes); it should hold the token ids (nanoGPT's "
                "prepare.py writes train.bin and val.bin)");
  }
  std::shared_ptr<TokenFile> f(new TokenFile());
  f->path_ = path;
  f->map_bytes_ = static_cast<size_t>(bytes);
  f->map_ = ::mmap(nullptr, f->map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (f->map_ == MAP_FAILED) {
    f->map_ = nullptr;
    throw Error("cannot map the token file '" + path + "': " + std::strerror(err));
  }
  const uint8_t* base = static_cast<const uint8_t*>(f->map_);
  int64_t offset = 0;
  f->dtype_ = dtype;
  if (bytes >= kLlmcHeaderBytes && Int32At(base, 0) == kLlmcMagic) {
    const int32_t version = Int32At(base, 1), count = Int32At(base, 2);
    OT_CHECK(version == 1 || version == 2,
             "'%s' has llm.c's header (magic %d) but version %d; versions 1 (uint16 tokens) and 2 (uint32) are known, "
             "so write the file again with one of them",
             path.c_str(), kLlmcMagic, version);
    f->version_ = version;
    f->dtype_ = version == 1 ? DType::kUInt16 : DType::kUInt32;
    offset = kLlmcHeaderBytes;
    const int64_t size = static_cast<int64_t>(DTypeSize(f->dtype_));
    OT_CHECK(count >= 0 && static_cast<int64_t>(count) * size == bytes - offset,
             "'%s': its llm.c header (version %d, %s tokens) says %d tokens (%lld bytes) but %lld bytes follow the "
             "%lld-byte header; the file is cut short or its header is wrong, so write it again",
             path.c_str(), version, DTypeName(f->dtype_).c_str(), count, (long long)count * size,
             (long long)(bytes - offset), (long long)kLlmcHeaderBytes);
  }
  const int64_t size = static_cast<int64_t>(DTypeSize(f->dtype_));
  OT_CHECK((bytes - offset) % size == 0,
           "the token file '%s' is %lld bytes, not a whole number of %s tokens (%lld bytes each); give the file's "
           "type with --token-dtype uint16|uint32|int32, or write the file again if it was cut short",
           path.c_str(), (long long)(bytes - offset), DTypeName(f->dtype_).c_str(), (long long)size);
  f->count_ = (bytes - offset) / size;
  OT_CHECK(f->count_ > 0, "the token file '%s' holds no tokens after its llm.c header; write it again with its tokens",
           path.c_str());
  f->tokens_ = base + offset;
  return f;
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

int64_t TokenFile::At(int64_t i) const {
  const uint8_t* p = tokens_ + i * static_cast<int64_t>(DTypeSize(dtype_));
  switch (dtype_) {
    case DType::kUInt16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::kUInt32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    default: { int32_t v; std::memcpy(&v, p, 4); return v; }
  }
}

TokenWindowSource::TokenWindowSource(std::shared_ptr<const TokenFile> file, const TokenWindowOptions& options)
    : file_(std::move(file)), o_(options) {
  if (o_.end < 0) o_.end = file_->size();
  OT_CHECK(o_.seq_len >= 1, "--seq-len must be 1 or more tokens");
  OT_CHECK(o_.input_type == DType::kInt64 || o_.input_type == DType::kInt32,
           "token windows feed int64 or int32 model inputs, not %s", DTypeName(o_.input_type).c_str());
  OT_CHECK(o_.begin >= 0 && o_.begin <= o_.end && o_.end <= file_->size(), "token range [%lld, %lld) is outside '%s'",
           (long long)o_.begin, (long long)o_.end, file_->path().c_str());
  const int64_t span = o_.end - o_.begin;
  OT_CHECK(span >= o_.seq_len + 1,
           "'%s' has %lld tokens%s, fewer than --seq-len %lld + 1 (a window and its next token); use a shorter "
           "--seq-len or more text",
           file_->path().c_str(), (long long)span,
           span == file_->size() ? ""
                                 : StrFormat(" in its part [%lld, %lld)", (long long)o_.begin, (long long)o_.end).c_str(),
           (long long)o_.seq_len);
  count_ = (span - 1) / o_.seq_len;
}

int64_t TokenWindowSource::Offset(int64_t index, int64_t epoch) const {
  if (!o_.random) return o_.begin + index * o_.seq_len;
  // nanoGPT's get_batch: a start in [0, span - T), here from (seed, epoch, sample index).
  std::mt19937_64 rng(StreamSeed(o_.seed ^ kOffsetStream, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)));
  return o_.begin + static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(o_.end - o_.begin - o_.seq_len)));
}

HostTensor TokenWindowSource::Window(const std::vector<int64_t>& indices, int64_t epoch, int64_t shift, DType type,
                                     const char* name) const {
  const int64_t n = static_cast<int64_t>(indices.size()), T = o_.seq_len;
  HostTensor t(type, {n, T}, name);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = indices[static_cast<size_t>(i)];
    OT_CHECK(index >= 0 && index < count_, "sample index %lld is outside the token windows of '%s' (%lld windows)",
             (long long)index, file_->path().c_str(), (long long)count_);
    const int64_t at = Offset(index, epoch) + shift;
    for (int64_t k = 0; k < T; ++k) {
      const int64_t v = file_->At(at + k);
      if (v < 0 || (o_.vocabulary > 0 && v >= o_.vocabulary))
        throw Error(StrFormat("'%s': token %lld at position %lld is outside [0, %lld)%s; the file does not fit this "
                              "model's vocabulary (check --token-dtype and the tokenizer)",
                              file_->path().c_str(), (long long)v, (long long)(at + k),
                              (long long)(o_.vocabulary > 0 ? o_.vocabulary : v),
                              o_.vocabulary_source.empty() ? "" : (", the rows of " + o_.vocabulary_source).c_str()));
      if (type == DType::kInt32) t.Data<int32_t>()[i * T + k] = static_cast<int32_t>(v);
      else t.Data<int64_t>()[i * T + k] = v;
    }
  }
  return t;
}

HostTensor TokenWindowSource::Inputs(const std::vector<int64_t>& indices, const AugmentOptions*, int64_t epoch,
                                     int64_t) const {
  return Window(indices, epoch, 0, o_.input_type, "input");
}

HostTensor TokenWindowSource::Labels(const std::vector<int64_t>& indices, int64_t epoch) const {
  return Window(indices, epoch, 1, DType::kInt64, "labels");
}

ImageDataset LoadTokenDataset(const std::string& rest, const std::string& split, const DataSourceOptions& options) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t comma = rest.find(',', start);
    parts.push_back(rest.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  OT_CHECK((parts.size() == 1 || parts.size() == 2) && !parts[0].empty() && !parts.back().empty(),
           "--data tokens needs TRAIN.bin or TRAIN.bin,VAL.bin, got 'tokens:%s'", rest.c_str());
  OT_CHECK(options.token_seq_len > 0,
           "--data tokens:%s needs --seq-len T, the tokens per sample (the model's input length when it is fixed)",
           rest.c_str());
  const bool have_val = parts.size() == 2;
  const bool test = split == "test";
  auto file = TokenFile::Open(parts[test && have_val ? 1 : 0], options.token_dtype);
  TokenWindowOptions wo;
  wo.seq_len = options.token_seq_len;
  wo.seed = options.seed;
  wo.random = !test;
  wo.vocabulary = options.token_vocabulary;
  wo.vocabulary_source = options.token_vocabulary_source;
  if (options.model_input && options.model_input->dtype == DType::kInt32) wo.input_type = DType::kInt32;
  std::string held;
  if (!have_val) {
    // The last --val-fraction of the tokens is the validation text, the rest trains.
    OT_CHECK(options.val_fraction > 0 && options.val_fraction < 1,
             "--data tokens:%s has no VAL.bin, so a --val-fraction in (0, 1) of it is held out; got %g", rest.c_str(),
             options.val_fraction);
    const int64_t cut = file->size() - static_cast<int64_t>(static_cast<double>(file->size()) * options.val_fraction);
    if (test) wo.begin = cut;
    else wo.end = cut;
    held = StrFormat(" (the last %g of the file is the validation text)", options.val_fraction);
  }
  auto source = std::make_shared<TokenWindowSource>(file, wo);
  ImageDataset ds;
  ds.name = "tokens:" + rest;
  ds.count = source->Count();
  ds.classes = options.token_vocabulary;
  ds.label_dims = {wo.seq_len};
  ds.source = source;
  const std::string kind = file->header_version() ? StrFormat("%s tokens (llm.c header, version %d)",
                                                              DTypeName(file->dtype()).c_str(), file->header_version())
                                                  : DTypeName(file->dtype()) + " tokens";
  if (!test)
    ds.notes.push_back(StrFormat("tokens: '%s', %lld %s, memory-mapped%s; samples are windows of %lld tokens at random "
                                 "offsets (targets: the next tokens), an epoch is (tokens - 1) / %lld = %lld samples",
                                 file->path().c_str(), (long long)(wo.end < 0 ? file->size() : wo.end), kind.c_str(),
                                 held.c_str(),
                                 (long long)wo.seq_len, (long long)wo.seq_len, (long long)ds.count));
  else
    ds.notes.push_back(StrFormat("validation: '%s'%s, %lld consecutive windows of %lld tokens", file->path().c_str(),
                                 have_val ? StrFormat(", %lld %s", (long long)file->size(), kind.c_str()).c_str()
                                          : StrFormat(" tokens [%lld, %lld)", (long long)wo.begin,
                                                      (long long)file->size()).c_str(),
                                 (long long)ds.count, (long long)wo.seq_len));
  return ds;
}

}  // namespace ot
