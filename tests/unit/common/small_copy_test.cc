// copy_small: every size from 0 to past its inline limit copies exactly its
// bytes, from and to any alignment, and writes nothing around them.
#include "common/small_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace lt {
namespace {

TEST(SmallCopy, EverySizeCopiesExactlyItsBytes) {
  constexpr size_t kPad = 16;
  for (size_t n = 0; n <= 80; ++n) {
    for (size_t align = 0; align < 8; ++align) {
      std::vector<std::byte> src(n + 2 * kPad), dst(n + 2 * kPad, std::byte{0xee});
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7 + n + 1);
      copy_small(dst.data() + kPad + align / 2, src.data() + kPad + align, n);
      for (size_t i = 0; i < dst.size(); ++i) {
        const size_t at = kPad + align / 2;
        const std::byte want =
            i >= at && i < at + n ? src[kPad + align + (i - at)] : std::byte{0xee};
        ASSERT_EQ(dst[i], want) << "n " << n << ", alignment " << align << ", byte " << i;
      }
    }
  }
}

}  // namespace
}  // namespace lt
