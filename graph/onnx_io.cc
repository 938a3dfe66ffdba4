// ONNX import and export.
#include "graph/onnx_io.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/inliner/inliner.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>

#include "graph/error.h"
#include "graph/file_util.h"
#include "graph/passes/legacy_rewrite.h"
#include "graph/passes/sequence_rewrite.h"
#include "graph/tensor_proto.h"
#include "graph/op_domains.h"

namespace ot {

namespace {

// The ONNX release this program is built against (scripts/build-onnx.sh pins it; CMake
// passes the version its package config states).
constexpr const char* kOnnxLibraryVersion = ONNXTRAIN_ONNX_VERSION;

bool IsTensorValue(const onnx::ValueInfoProto& v) { return !v.has_type() || v.type().has_tensor_type(); }

ValueInfo ValueInfoFromProto(const onnx::ValueInfoProto& v) {
  ValueInfo out;
  out.name = v.name();
  if (!v.has_type() || !v.type().has_tensor_type()) return out;
  const auto& tt = v.type().tensor_type();
  out.dtype = DTypeIsKnown(tt.elem_type()) ? static_cast<DType>(tt.elem_type()) : DType::kUndefined;
  if (tt.has_shape()) {
    out.has_shape = true;
    for (const auto& d : tt.shape().dim()) {
      Dim dim;
      if (d.has_dim_value()) dim.value = d.dim_value();
      else if (d.has_dim_param()) dim.param = d.dim_param();
      out.dims.push_back(dim);
    }
  }
  return out;
}

void ValueInfoToProto(const ValueInfo& v, onnx::ValueInfoProto* p) {
  p->set_name(v.name);
  auto* tt = p->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(v.dtype));
  if (v.has_shape) {
    auto* shape = tt->mutable_shape();
    for (const auto& d : v.dims) {
      auto* pd = shape->add_dim();
      if (d.IsStatic()) pd->set_dim_value(d.value);
      else if (!d.param.empty()) pd->set_dim_param(d.param);
    }
  }
}

Attribute AttributeFromProto(const onnx::AttributeProto& a, const std::string& base_dir, const std::string& where) {
  Attribute out;
  using AP = onnx::AttributeProto;
  switch (a.type()) {
    case AP::FLOAT: out.kind = Attribute::Kind::kFloat; out.f = a.f(); break;
    case AP::INT: out.kind = Attribute::Kind::kInt; out.i = a.i(); break;
    case AP::STRING: out.kind = Attribute::Kind::kString; out.s = a.s(); break;
    case AP::TENSOR:
      out.kind = Attribute::Kind::kTensor;
      out.t = TensorFromProto(a.t(), base_dir, where + " attribute '" + a.name() + "'");
      break;
    case AP::FLOATS: out.kind = Attribute::Kind::kFloats; out.floats.assign(a.floats().begin(), a.floats().end()); break;
    case AP::INTS: out.kind = Attribute::Kind::kInts; out.ints.assign(a.ints().begin(), a.ints().end()); break;
    case AP::STRINGS: out.kind = Attribute::Kind::kStrings; out.strings.assign(a.strings().begin(), a.strings().end()); break;
    case AP::GRAPH: case AP::GRAPHS:
      throw UnsupportedError(where + " has a subgraph attribute '" + a.name() +
                             "': control flow (If, Loop, Scan) is not supported");
    default: out.kind = Attribute::Kind::kOther; break;
  }
  return out;
}

void AttributeToProto(const std::string& name, const Attribute& a, onnx::AttributeProto* p) {
  using AP = onnx::AttributeProto;
  p->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::kFloat: p->set_type(AP::FLOAT); p->set_f(a.f); break;
    case Attribute::Kind::kInt: p->set_type(AP::INT); p->set_i(a.i); break;
    case Attribute::Kind::kString: p->set_type(AP::STRING); p->set_s(a.s); break;
    case Attribute::Kind::kTensor: p->set_type(AP::TENSOR); TensorToProto(a.t, p->mutable_t()); break;
    case Attribute::Kind::kFloats:
      p->set_type(AP::FLOATS);
      for (float f : a.floats) p->add_floats(f);
      break;
    case Attribute::Kind::kInts:
      p->set_type(AP::INTS);
      for (int64_t i : a.ints) p->add_ints(i);
      break;
    case Attribute::Kind::kStrings:
      p->set_type(AP::STRINGS);
      for (const auto& s : a.strings) p->add_strings(s);
      break;
    default:
      throw Error("attribute '" + name + "' of a kind (graph or sparse tensor) that onnx-train cannot export");
  }
}

// A model newer than the ONNX release we build cannot be checked or inferred: say so in
// one line naming both versions, before the checker's own message would.
void CheckVersionsKnown(const onnx::ModelProto& proto, const std::string& where) {
  const int64_t known_ir = onnx::Version::IR_VERSION;
  OT_CHECK(proto.ir_version() <= known_ir,
           "%s has ONNX IR version %lld, newer than the IR %lld of the ONNX %s library onnx-train is built "
           "with; export it with an older IR version (or opset), or rebuild onnx-train against a newer ONNX "
           "(scripts/build-onnx.sh)",
           where.c_str(), (long long)proto.ir_version(), (long long)known_ir, kOnnxLibraryVersion);
  const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const auto& op : proto.opset_import()) {
    std::string domain = CanonicalDomain(op.domain());
    auto it = ranges.find(domain);
    if (it == ranges.end()) continue;  // a domain ONNX does not define (custom ops): the runtime decides
    OT_CHECK(op.version() <= it->second.second,
             "%s imports opset %lld of domain '%s', newer than the %d the ONNX %s library onnx-train is built "
             "with knows; export at opset %d or lower (torch.onnx.export(..., opset_version=%d))",
             where.c_str(), (long long)op.version(), domain.empty() ? kOnnxDomain : domain.c_str(),
             it->second.second, kOnnxLibraryVersion, it->second.second, it->second.second);
  }
}

}  // namespace

Model ModelFromProto(const onnx::ModelProto& proto, const std::string& base_dir, const std::string& where) {
  Model m;
  m.ir_version = proto.ir_version();
  m.producer_name = proto.producer_name();
  m.producer_version = proto.producer_version();
  for (const auto& op : proto.opset_import()) {
    std::string d = CanonicalDomain(op.domain());
    m.opsets[d] = op.version();
  }
  const auto& g = proto.graph();
  m.graph.name = g.name();
  for (const auto& t : g.initializer())
    m.graph.initializers.push_back(TensorFromProto(t, base_dir, where + " initializer '" + t.name() + "'"));
  OT_CHECK(g.sparse_initializer_size() == 0, "%s: sparse initializers are not supported", where.c_str());
  for (const auto* list : {&g.input(), &g.output()})
    for (const auto& v : *list)
      if (!IsTensorValue(v))
        throw UnsupportedError(where + ": graph value '" + v.name() +
                               "' is a sequence, map or optional; only tensors are supported");
  for (const auto& v : g.input()) {
    if (m.graph.FindInitializer(v.name())) continue;  // IR < 4 lists initializers as inputs
    m.graph.inputs.push_back(ValueInfoFromProto(v));
  }
  for (const auto& v : g.output()) m.graph.outputs.push_back(ValueInfoFromProto(v));
  for (const auto& v : g.value_info())
    if (IsTensorValue(v)) m.graph.value_info[v.name()] = ValueInfoFromProto(v);
  for (const auto& n : g.node()) {
    Node node;
    node.name = n.name();
    node.op_type = n.op_type();
    node.domain = CanonicalDomain(n.domain());
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    for (const auto& kv : n.metadata_props()) node.metadata[kv.key()] = kv.value();
    for (const auto& a : n.attribute()) {
      if (!a.ref_attr_name().empty())
        throw Error(where + ": " + node.Describe() + " uses a reference attribute, which only functions may use");
      node.attrs[a.name()] = AttributeFromProto(a, base_dir, where + " " + node.Describe());
    }
    m.graph.nodes.push_back(std::move(node));
  }
  return m;
}

void ModelToProto(const Model& m, onnx::ModelProto* proto) {
  proto->Clear();
  proto->set_ir_version(m.ir_version);
  proto->set_producer_name(m.producer_name.empty() ? "onnx-train" : m.producer_name);
  proto->set_producer_version(m.producer_version);
  for (const auto& [domain, version] : m.opsets) {
    auto* op = proto->add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  auto* g = proto->mutable_graph();
  g->set_name(m.graph.name.empty() ? "graph" : m.graph.name);
  for (const auto& t : m.graph.initializers) TensorToProto(t, g->add_initializer());
  for (const auto& v : m.graph.inputs) ValueInfoToProto(v, g->add_input());
  if (m.ir_version < 4) {
    // Before IR 4 every initializer had to be listed as a graph input too.
    for (const auto& t : m.graph.initializers) {
      ValueInfo v;
      v.name = t.name;
      v.dtype = t.dtype;
      v.has_shape = true;
      for (int64_t d : t.dims) v.dims.push_back(Dim{d, ""});
      ValueInfoToProto(v, g->add_input());
    }
  }
  for (const auto& v : m.graph.outputs) {
    // The checker wants a shape on graph outputs: take the inferred one when missing.
    auto inferred = m.graph.value_info.find(v.name);
    bool use_inferred = !v.has_shape && inferred != m.graph.value_info.end() && inferred->second.has_shape;
    ValueInfoToProto(use_inferred ? inferred->second : v, g->add_output());
  }
  for (const auto& [name, v] : m.graph.value_info)
    if (v.dtype != DType::kUndefined) ValueInfoToProto(v, g->add_value_info());
  // ONNX wants nodes topologically sorted; passes may append nodes in any order.
  std::vector<size_t> order;
  try {
    order = m.graph.TopologicalOrder();
  } catch (const Error&) {
    for (size_t i = 0; i < m.graph.nodes.size(); ++i) order.push_back(i);  // the checker will say what is wrong
  }
  for (size_t index : order) {
    const Node& n = m.graph.nodes[index];
    auto* pn = g->add_node();
    pn->set_name(n.name);
    pn->set_op_type(n.op_type);
    if (!n.domain.empty()) pn->set_domain(n.domain);
    for (const auto& i : n.inputs) pn->add_input(i);
    for (const auto& o : n.outputs) pn->add_output(o);
    for (const auto& [key, a] : n.attrs) AttributeToProto(key, a, pn->add_attribute());
    for (const auto& [key, value] : n.metadata) {
      auto* kv = pn->add_metadata_props();
      kv->set_key(key);
      kv->set_value(value);
    }
  }
}

Model LoadModelFromBytes(const std::string& bytes, const std::string& where, const std::string& base_dir,
                         const LoadOptions& options) {
  OT_CHECK(!bytes.empty(), "%s is empty; expected an ONNX model", where.c_str());
  onnx::ModelProto proto;
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                static_cast<int>(bytes.size()));
  stream.SetTotalBytesLimit(INT32_MAX);
  OT_CHECK(proto.ParseFromCodedStream(&stream) && stream.ConsumedEntireMessage(),
           "%s is not an ONNX model: the protobuf cannot be parsed (corrupt or truncated file)", where.c_str());
  OT_CHECK(proto.has_graph() && proto.opset_import_size() > 0,
           "%s is not an ONNX model: it has no graph or no opset_import (truncated, or another protobuf?)",
           where.c_str());
  CheckVersionsKnown(proto, where);
  if (proto.functions_size() > 0) {
    // PyTorch 2.x and other producers may write model-local functions: ONNX's inliner
    // replaces each call by the function's body (renamed apart), so the rest sees plain ops.
    try {
      onnx::inliner::InlineLocalFunctions(proto, /*convert_version=*/true);
    } catch (const std::exception& e) {
      throw Error(where + ": its model-local functions cannot be inlined: " + e.what());
    }
  }
  Model model = ModelFromProto(proto, base_dir, where);
  RewriteSequenceOps(model);  // torch.split/chunk's SplitToSequence + SequenceAt become Split
  RewriteLegacyOps(model);    // ImageScaler (opsets 1-9, gone from current ONNX) becomes Mul and Add
  if (options.run_checker || options.infer_shapes) {
    // The checker and shape inference read tensors inline: give them the IR's view.
    onnx::ModelProto full;
    ModelToProto(model, &full);
    if (options.run_checker) {
      try {
        onnx::checker::check_model(full, /*full_check=*/false);
      } catch (const std::exception& e) {
        throw Error(where + " fails the ONNX checker: " + e.what());
      }
    }
    if (options.infer_shapes) {
      try {
        onnx::shape_inference::InferShapes(full);
      } catch (const std::exception& e) {
        throw Error(where + " fails ONNX shape inference: " + e.what());
      }
      for (const auto& v : full.graph().value_info())
        if (IsTensorValue(v)) model.graph.value_info[v.name()] = ValueInfoFromProto(v);
    }
  }
  return model;
}

Model LoadModel(const std::string& path, const LoadOptions& options) {
  Model m = LoadModelFromBytes(ReadFileBytes(path), "'" + path + "'", DirName(path), options);
  m.path = path;
  return m;
}

Model WithShapesInferredAgain(const Model& model) {
  Model m = model;
  m.graph.value_info.clear();
  onnx::ModelProto proto;
  ModelToProto(m, &proto);
  LoadOptions lo;
  lo.run_checker = false;
  Model out = LoadModelFromBytes(proto.SerializeAsString(), model.path.empty() ? "the model" : model.path, "", lo);
  out.path = model.path;
  return out;
}

void SaveModel(const Model& model, const std::string& path, const SaveOptions& options) {
  onnx::ModelProto proto;
  ModelToProto(model, &proto);
  int64_t total = 0;
  for (const auto& t : model.graph.initializers) total += static_cast<int64_t>(t.NumBytes());
  const size_t slash = path.find_last_of('/');
  const std::string data_name = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".data";
  const std::string data_path = DirName(path) + "/" + data_name;
  if (total > options.external_above_bytes) {
    // Tensors in file order, each at the next 64-byte boundary (memory-mappable, aligned
    // for vector loads), the rest inline.
    std::string data;
    for (auto& t : *proto.mutable_graph()->mutable_initializer()) {
      if (static_cast<int64_t>(t.raw_data().size()) < options.min_external_bytes) continue;
      data.resize((data.size() + 63) / 64 * 64, '\0');
      const size_t offset = data.size();
      data += t.raw_data();
      t.clear_raw_data();
      t.set_data_location(onnx::TensorProto::EXTERNAL);
      auto add = [&](const char* key, const std::string& value) {
        auto* kv = t.add_external_data();
        kv->set_key(key);
        kv->set_value(value);
      };
      add("location", data_name);
      add("offset", std::to_string(offset));
      add("length", std::to_string(data.size() - offset));
    }
    WriteFileAtomic(data_path, data);
  }
  std::string bytes;
  OT_CHECK(proto.SerializeToString(&bytes),
           "cannot serialize the model for '%s': its graph without the weights is over 2 GB", path.c_str());
  WriteFileAtomic(path, bytes);
  if (total <= options.external_above_bytes) ::unlink(data_path.c_str());  // an earlier, larger save's data
}

void CheckModel(const Model& model) {
  onnx::ModelProto proto;
  ModelToProto(model, &proto);
  try {
    onnx::checker::check_model(proto);
  } catch (const std::exception& e) {
    throw Error("the model fails the ONNX checker: " + std::string(e.what()));
  }
}

}  // namespace ot
