// Quantization error of the weight quantizers on a real or synthetic model: every matrix whose
// rows are whole 256-value super-blocks, every `stride`-th row, quantized to each type and back;
// prints the relative RMS error sqrt(sum (x - x')^2 / sum x^2) per type and tensor kind.
//   quant_error MODEL.gguf [STRIDE=8] [TYPE...]   (types default to q4_k q5_k q6_k)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "loom/kernels/matmul.h"
#include "loom/kernels/quantize.h"
#include "loom/model/convert.h"
#include "loom/model/model_file.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: quant_error MODEL [STRIDE=8] [TYPE...]\n");
    return 2;
  }
  const int64_t stride = argc > 2 ? std::stoll(argv[2]) : 8;
  std::vector<std::string> types;
  for (int i = 3; i < argc; ++i) types.emplace_back(argv[i]);
  if (types.empty()) types = {"q4_k", "q5_k", "q6_k"};
  auto m = loom::model::OpenModel(argv[1]);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    return 1;
  }
  for (const std::string& name : types) {
    auto type = loom::model::ParseWeightType(name);
    if (!type.ok()) {
      std::fprintf(stderr, "%s\n", type.status().ToString().c_str());
      return 1;
    }
    const auto start = std::chrono::steady_clock::now();
    double err2 = 0, x2 = 0;
    int64_t values = 0;
    std::map<std::string, std::pair<double, double>> by_kind;  // "ffn_down" -> (err2, x2)
    for (const auto& [tensor, t] : (*m)->tensors) {
      if (t.shape.size() != 2 || t.shape[1] % 256 != 0) continue;
      const int64_t cols = t.shape[1];
      std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(cols));
      const int64_t bytes = loom::kernels::RowBytes(*type, cols).value();
      std::vector<std::byte> q(static_cast<size_t>(bytes));
      const size_t dot = tensor.rfind('.');
      const size_t prev = tensor.rfind('.', dot - 1);
      const std::string kind = tensor.substr(prev + 1, dot - prev - 1);
      for (int64_t r = 0; r < t.shape[0]; r += stride) {
        loom::model::ReadRowF32(t, r, x.data());
        loom::kernels::QuantizeRow(*type, x.data(), cols, q.data());
        loom::kernels::DequantizeRow(loom::kernels::MatrixView{*type, 1, cols, q.data(), bytes}, 0,
                                     y.data());
        double e = 0, s = 0;
        for (int64_t i = 0; i < cols; ++i) {
          const double d = static_cast<double>(x[static_cast<size_t>(i)]) - y[static_cast<size_t>(i)];
          e += d * d;
          s += static_cast<double>(x[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
        }
        err2 += e;
        x2 += s;
        by_kind[kind].first += e;
        by_kind[kind].second += s;
        values += cols;
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-5s relative RMS error %.4f%% over %lld values (%.1f s)\n", name.c_str(),
                100.0 * std::sqrt(err2 / x2), static_cast<long long>(values), seconds);
    for (const auto& [kind, e] : by_kind) {
      std::printf("        %-12s %.4f%%\n", kind.c_str(), 100.0 * std::sqrt(e.first / e.second));
    }
  }
  return 0;
}
