// Shapes are small vectors of non-negative extents; strides count elements, not bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);
std::string shape_str(const Shape& s);  // "[64, 300]"
// The extents before / after `axis`, multiplied: the tensor seen as [outer, s[axis], inner].
int64_t outer_numel(const Shape& s, int64_t axis);
int64_t inner_numel(const Shape& s, int64_t axis);
// The coordinates of the element at row-major flat index `flat` of a tensor of shape s.
Shape unravel_index(const Shape& s, int64_t flat);

// Normalises a possibly negative axis against rank; throws kInvalidArgument when out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* what);

}  // namespace cohort
