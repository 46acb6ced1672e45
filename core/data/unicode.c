/* Lookups in the generated category tables (unicode_tab.c), and the short
 * White_Space list, which is written out here: it has not changed since
 * Unicode 6.3. */
#include "core/data/unicode.h"

static bool in_ranges(const gt_uni_range *r, size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (cp < r[mid].lo)
      hi = mid;
    else if (cp > r[mid].hi)
      lo = mid + 1;
    else
      return true;
  }
  return false;
}

bool gt_uni_is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(gt_uni_letters, gt_uni_letters_len, cp);
}

bool gt_uni_is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(gt_uni_numbers, gt_uni_numbers_len, cp);
}

bool gt_uni_is_space(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
