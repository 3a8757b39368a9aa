#include "io/checkpoint.h"

namespace dsv4 {

std::string ShapeToString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Result<const TensorInfo*> CheckpointReader::Lookup(std::string_view name) const {
  if (const TensorInfo* t = Find(name)) return t;
  return NotFound(path() + ": tensor '" + std::string(name) + "' is missing",
                  "is this checkpoint for the architecture its config names?");
}

Result<TensorView> CheckpointReader::Get(std::string_view name,
                                         std::initializer_list<int64_t> shape) const {
  ASSIGN_OR_RETURN(const TensorInfo* t, Lookup(name));
  std::vector<int64_t> want(shape);
  if (t->shape != want) {
    return InvalidArgument(path() + ": tensor '" + t->name + "' has shape " +
                               ShapeToString(t->shape) + ", expected " + ShapeToString(want),
                           "the weights do not match the model config");
  }
  return t->view();
}

}  // namespace dsv4
