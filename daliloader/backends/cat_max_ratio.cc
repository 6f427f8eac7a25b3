// daliloader's DALI operator for mmsegmentation's category-ratio crop (cat_max_ratio): a CPU operator,
// compiled against the installed DALI on first use (daliloader/backends/dali_native.py), because DALI has
// no operator that counts classes and the graph must stay serializable for DALIDataset.
//
// fn.daliloader.cat_max_ratio_window(labels, starts, shape, num_classes=C, ratio="0.75") -> (2,) int32
//
//   labels: (H, W) or (H, W, 1) uint8 or uint16 class indices of the whole mask
//   starts: (K, 2) int32, the candidate windows' (top, left); they may overhang the image
//   shape:  (2,) int32, the windows' (height, width)
//
// The contract is daliloader.stages.choose_window's (the reference, which the tests hold this to): the
// candidates 0..K-2 are checked in turn; one passes when, counting the part of its window inside the
// image and leaving out every value >= num_classes (the ignore index), more than one class is there and
// max(count) / sum(count) < ratio, in double. The first that passes is returned, else candidate K-1,
// unchecked. `ratio` is a string (Python's repr of the float) because DALI passes float arguments as
// float32, which would move the boundary.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <vector>

#include "dali/pipeline/operator/operator.h"

namespace daliloader {

using ::dali::CPUBackend;
using ::dali::OutputDesc;
using ::dali::Workspace;

namespace {

// The pixels of each class in labels[y0:y1, x0:x1] (row stride `stride`), values >= num_classes in
// bin num_classes. Four interleaved sub-histograms break the store-to-load chain of equal neighbours.
template <typename T>
void CountWindow(const T *labels, int64_t stride, int64_t y0, int64_t y1, int64_t x0, int64_t x1,
                 int num_classes, std::vector<uint64_t> &counts) {
  constexpr int kLanes = 4;
  const int bins = num_classes + 1;
  std::vector<uint64_t> lanes(static_cast<size_t>(kLanes) * bins, 0);
  const unsigned top_bin = static_cast<unsigned>(num_classes);
  auto bin = [top_bin](T v) { return std::min<unsigned>(v, top_bin); };
  for (int64_t y = y0; y < y1; y++) {
    const T *row = labels + y * stride;
    int64_t x = x0;
    for (; x + kLanes <= x1; x += kLanes)
      for (int lane = 0; lane < kLanes; lane++) lanes[lane * bins + bin(row[x + lane])]++;
    for (; x < x1; x++) lanes[bin(row[x])]++;
  }
  counts.assign(bins, 0);
  for (int lane = 0; lane < kLanes; lane++)
    for (int b = 0; b < bins; b++) counts[b] += lanes[lane * bins + b];
}

// The ratio from its text, whatever the locale (std::stod reads "0.75" as 0 under a decimal comma).
double ParseRatio(const std::string &text) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  DALI_ENFORCE(error == std::errc() && end == text.data() + text.size(), "ratio is not a number: " + text);
  return value;
}

// Whether a window with these class counts passes: more than one class, the largest below `ratio`.
bool Balanced(const std::vector<uint64_t> &counts, int num_classes, double ratio) {
  uint64_t total = 0, most = 0;
  int present = 0;
  for (int c = 0; c < num_classes; c++) {
    present += counts[c] > 0;
    total += counts[c];
    most = std::max(most, counts[c]);
  }
  return present > 1 && static_cast<double>(most) / static_cast<double>(total) < ratio;
}

template <typename T>
void Choose(const T *labels, int64_t height, int64_t width, const int32_t *starts, int k_count,
            const int32_t *shape, int num_classes, double ratio, int32_t *out) {
  int chosen = k_count - 1;
  std::vector<uint64_t> counts;
  for (int k = 0; k + 1 < k_count; k++) {
    const int64_t top = starts[2 * k], left = starts[2 * k + 1];
    const int64_t y0 = std::max<int64_t>(top, 0), y1 = std::min<int64_t>(top + shape[0], height);
    const int64_t x0 = std::max<int64_t>(left, 0), x1 = std::min<int64_t>(left + shape[1], width);
    if (y1 <= y0 || x1 <= x0) continue;  // nothing of the image in the window: no class, fails
    CountWindow<T>(labels, width, y0, y1, x0, x1, num_classes, counts);
    if (Balanced(counts, num_classes, ratio)) {
      chosen = k;
      break;
    }
  }
  out[0] = starts[2 * chosen];
  out[1] = starts[2 * chosen + 1];
}

}  // namespace

class CatMaxRatioWindow : public ::dali::Operator<CPUBackend> {
 public:
  explicit CatMaxRatioWindow(const ::dali::OpSpec &spec)
      : ::dali::Operator<CPUBackend>(spec),
        num_classes_(spec.GetArgument<int>("num_classes")),
        ratio_(ParseRatio(spec.GetArgument<std::string>("ratio"))) {
    DALI_ENFORCE(num_classes_ >= 1 && num_classes_ <= 65536, "num_classes must be in [1, 65536]");
  }

 protected:
  bool SetupImpl(std::vector<OutputDesc> &output_desc, const Workspace &ws) override {
    const auto &labels = ws.Input<CPUBackend>(0);
    const auto &starts = ws.Input<CPUBackend>(1);
    const auto &shape = ws.Input<CPUBackend>(2);
    const int n = labels.num_samples();
    DALI_ENFORCE(labels.type() == DALI_UINT8 || labels.type() == DALI_UINT16, "labels must be uint8 or uint16");
    DALI_ENFORCE(starts.type() == DALI_INT32 && shape.type() == DALI_INT32, "starts and shape must be int32");
    for (int i = 0; i < n; i++) {
      const auto &ls = labels.tensor_shape(i);
      DALI_ENFORCE(ls.size() == 2 || (ls.size() == 3 && ls[2] == 1),
                   ::dali::make_string("labels must be (H, W) or (H, W, 1), got ", ls));
      const auto &ss = starts.tensor_shape(i);
      DALI_ENFORCE(ss.size() == 2 && ss[1] == 2 && ss[0] >= 1,
                   ::dali::make_string("starts must be (K, 2) with K >= 1, got ", ss));
      DALI_ENFORCE(shape.tensor_shape(i).size() == 1 && shape.tensor_shape(i)[0] == 2, "shape must be (2,)");
    }
    output_desc.resize(1);
    output_desc[0].shape = ::dali::uniform_list_shape(n, ::dali::TensorShape<1>{2});
    output_desc[0].type = DALI_INT32;
    return true;
  }

  void RunImpl(Workspace &ws) override {
    const auto &labels = ws.Input<CPUBackend>(0);
    const auto &starts = ws.Input<CPUBackend>(1);
    const auto &shape = ws.Input<CPUBackend>(2);
    auto &out = ws.Output<CPUBackend>(0);
    auto &pool = ws.GetThreadPool();
    for (int i = 0; i < labels.num_samples(); i++) {
      const int64_t height = labels.tensor_shape(i)[0], width = labels.tensor_shape(i)[1];
      pool.AddWork([&, i, height, width](int) {
        const int k_count = static_cast<int>(starts.tensor_shape(i)[0]);
        const int32_t *st = starts.tensor<int32_t>(i), *sh = shape.tensor<int32_t>(i);
        int32_t *o = out.mutable_tensor<int32_t>(i);
        if (labels.type() == DALI_UINT8)
          Choose<uint8_t>(labels.tensor<uint8_t>(i), height, width, st, k_count, sh, num_classes_, ratio_, o);
        else
          Choose<uint16_t>(labels.tensor<uint16_t>(i), height, width, st, k_count, sh, num_classes_, ratio_, o);
      }, height * width);
    }
    pool.RunAll();
  }

 private:
  int num_classes_;
  double ratio_;
};

}  // namespace daliloader

DALI_REGISTER_OPERATOR(daliloader__CatMaxRatioWindow, ::daliloader::CatMaxRatioWindow, ::dali::CPU);

DALI_SCHEMA(daliloader__CatMaxRatioWindow)
    .DocStr("mmsegmentation's category-ratio crop: the (top, left) of the first candidate window in which "
            "no class covers `ratio` of the labelled pixels or more and more than one class is there; else "
            "the last candidate (daliloader.stages.choose_window).")
    .NumInput(3)
    .InputDox(0, "labels", "TensorList", "(H, W) or (H, W, 1) uint8 or uint16 class indices")
    .InputDox(1, "starts", "TensorList", "(K, 2) int32 candidate (top, left)")
    .InputDox(2, "shape", "TensorList", "(2,) int32 window (height, width)")
    .NumOutput(1)
    .AddArg("num_classes", "The classes; values >= num_classes (the ignore index) are not counted.", DALI_INT32)
    .AddArg("ratio", "cat_max_ratio, as Python's repr of the float (DALI passes floats as float32).",
            DALI_STRING);
