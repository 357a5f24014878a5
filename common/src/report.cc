#include "c4/common/report.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>
#include <utility>

#include "report_internal.h"
#include "report_schema.h"

namespace c4::report {
namespace {

using json = nlohmann::json;

// The schema nests at most 5 levels (batch > reports > connections > subflows > object).
constexpr std::size_t kMaxDepth = 8;

// The most values and keys one document may hold in the DOM. A DOM value costs 16 bytes and more
// (a map node and its key for an object member), while its CBOR encoding may be one byte: without
// a bound, a 64 MiB body of one-byte items builds several GiB. Valid CBOR never builds a DOM (the
// streaming decoder takes it); JSON does, and 2 Mi items hold thousands of full rank reports
// (a batch's usual size is a few hundred). Worst case per document: ~200 MiB, freed at once.
constexpr std::size_t kMaxDomItems = std::size_t{2} << 20;

Error invalid(const std::string& path, const std::string& what) {
  return Error{ErrorCode::kInvalidArgument, path + ": " + what};
}

// ---- Bounded DOM building: depth (nlohmann's binary readers recurse per nesting level) and
// items (memory) ---------------------------------------------------------------------------------

class BoundedSax {
 public:
  explicit BoundedSax(json& root) : dom_(root, false) {}

  bool null() { return item() && dom_.null(); }
  bool boolean(bool v) { return item() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return item() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return item() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& s) {
    return item() && dom_.number_float(v, s);
  }
  bool string(std::string& v) { return item() && dom_.string(v); }
  bool binary(json::binary_t& /*v*/) {
    error_ = "binary values are not part of the schema";
    return false;
  }
  bool start_object(std::size_t n) {
    if (++depth_ > kMaxDepth) return tooDeep();
    return item() && dom_.start_object(n);
  }
  bool key(std::string& k) { return item() && dom_.key(k); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (++depth_ > kMaxDepth) return tooDeep();
    return item() && dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) {
    error_ = "malformed input at byte " + std::to_string(pos) + ": " + ex.what();
    return false;
  }
  [[nodiscard]] const std::string& error() const { return error_; }

 private:
  bool tooDeep() {
    error_ = "nesting deeper than " + std::to_string(kMaxDepth) + " levels";
    return false;
  }
  bool item() {
    if (++items_ <= kMaxDomItems) return true;
    error_ = "more than " + std::to_string(kMaxDomItems) + " values and keys";
    return false;
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::size_t depth_ = 0;
  std::size_t items_ = 0;
  std::string error_;
};

// The chunks of an indefinite-length string must be definite-length strings of its major type
// (RFC 8949 §3.2.3). nlohmann's reader accepts indefinite chunks too and reads them by recursing
// once per nesting level, outside the SAX depth bound: a body of 0x7f bytes overflows the stack.
// One linear pass over the item heads (strings' payloads skipped) finds such a chunk; anything
// else malformed is left to nlohmann's reader. Returns the offset of the first bad chunk.
std::optional<std::size_t> nestedIndefiniteChunk(std::span<const std::uint8_t> bytes) {
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  // Reads the argument of the head at bytes[i] (i past it afterwards); false when truncated or
  // reserved (28..30): nlohmann refuses those itself.
  auto head = [&](std::uint64_t& arg) {
    const unsigned ai = bytes[i++] & 0x1fu;
    if (ai < 24 || ai == 31) {
      arg = ai;
      return true;
    }
    if (ai > 27) return false;
    const std::size_t len = std::size_t{1} << (ai - 24);
    if (n - i < len) return false;
    arg = 0;
    for (std::size_t k = 0; k < len; ++k) arg = (arg << 8) | bytes[i + k];
    i += len;
    return true;
  };
  while (i < n) {
    const unsigned major = bytes[i] >> 5;
    const bool indefinite = (bytes[i] & 0x1fu) == 31;
    std::uint64_t arg = 0;
    if (!head(arg)) return std::nullopt;
    if (major != 2 && major != 3) continue;  // containers' items follow inline
    if (!indefinite) {
      if (arg > n - i) return std::nullopt;
      i += static_cast<std::size_t>(arg);
      continue;
    }
    while (i < n && bytes[i] != 0xff) {
      if ((bytes[i] >> 5) != major || (bytes[i] & 0x1fu) == 31) return i;
      if (!head(arg) || arg > n - i) return std::nullopt;
      i += static_cast<std::size_t>(arg);
    }
    ++i;  // the break
  }
  return std::nullopt;
}

Result<json> parseCbor(std::span<const std::uint8_t> bytes, std::size_t max_bytes,
                       const char* what) {
  if (bytes.empty())
    return makeError(ErrorCode::kInvalidArgument, std::string(what) + ": empty input");
  if (bytes.size() > max_bytes) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": " + std::to_string(bytes.size()) +
                         " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  if (auto at = nestedIndefiniteChunk(bytes)) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": invalid CBOR: byte " + std::to_string(*at) +
                         ": a chunk of an indefinite-length string must be a definite-length "
                         "string of the same type");
  }
  json root;
  BoundedSax sax(root);
  bool ok = false;
  try {
    ok = json::sax_parse(bytes.begin(), bytes.end(), &sax, json::input_format_t::cbor, true);
  } catch (const std::exception& e) {
    return makeError(ErrorCode::kInvalidArgument, std::string(what) + ": " + e.what());
  }
  if (!ok) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": invalid CBOR: " +
                         (sax.error().empty() ? std::string("rejected") : sax.error()));
  }
  return root;
}

Result<json> parseJson(std::string_view text, std::size_t max_bytes, const char* what) {
  if (text.size() > max_bytes) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": " + std::to_string(text.size()) +
                         " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  json root;
  BoundedSax sax(root);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json, true);
  } catch (const std::exception& e) {
    return makeError(ErrorCode::kInvalidArgument, std::string(what) + ": " + e.what());
  }
  if (!ok) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": invalid JSON: " +
                         (sax.error().empty() ? std::string("rejected") : sax.error()));
  }
  return root;
}

// ---- Strict object reader
// ------------------------------------------------------------------------

bool validUtf8(std::string_view s) {
  std::size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    unsigned char c = p[i];
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    for (std::size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size() || (p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

class Reader {
 public:
  Reader(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  static Result<Reader> open(const json& j, std::string path) {
    if (!j.is_object()) return std::unexpected(invalid(path, "must be an object"));
    return Reader(j, std::move(path));
  }

  [[nodiscard]] const std::string& path() const { return path_; }

  [[nodiscard]] std::string field(std::string_view key) const {
    return path_ + "." + std::string(key);
  }

  [[nodiscard]] bool has(std::string_view key) const {
    return obj_.find(std::string(key)) != obj_.end();
  }

  Result<const json*> get(std::string_view key) {
    auto it = obj_.find(std::string(key));
    if (it == obj_.end()) return std::unexpected(invalid(field(key), "missing"));
    seen_.insert(std::string(key));
    return &*it;
  }

  Result<std::uint64_t> u64(std::string_view key,
                            std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    std::uint64_t out = 0;
    if (v->is_number_unsigned()) {
      out = v->get<std::uint64_t>();
    } else if (v->is_number_integer() && v->get<std::int64_t>() >= 0) {
      out = static_cast<std::uint64_t>(v->get<std::int64_t>());
    } else {
      return std::unexpected(invalid(field(key), "must be a non-negative integer"));
    }
    if (out > max) {
      return std::unexpected(
          invalid(field(key), std::to_string(out) + " exceeds the maximum " + std::to_string(max)));
    }
    return out;
  }

  Result<std::int64_t> i64(std::string_view key, std::int64_t min, std::int64_t max) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    std::int64_t out = 0;
    if (v->is_number_unsigned()) {
      auto u = v->get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return std::unexpected(invalid(field(key), "out of range"));
      }
      out = static_cast<std::int64_t>(u);
    } else if (v->is_number_integer()) {
      out = v->get<std::int64_t>();
    } else {
      return std::unexpected(invalid(field(key), "must be an integer"));
    }
    if (out < min || out > max) {
      return std::unexpected(invalid(field(key), std::to_string(out) + " is outside [" +
                                                     std::to_string(min) + ", " +
                                                     std::to_string(max) + "]"));
    }
    return out;
  }

  Result<double> f64(std::string_view key, double min, double max) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    if (!v->is_number()) return std::unexpected(invalid(field(key), "must be a number"));
    double d = v->get<double>();
    if (!std::isfinite(d) || d < min || d > max) {
      return std::unexpected(invalid(
          field(key),
          "must be finite and within [" + std::to_string(min) + ", " + std::to_string(max) + "]"));
    }
    return d;
  }

  Result<bool> boolean(std::string_view key) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    if (!v->is_boolean()) return std::unexpected(invalid(field(key), "must be a boolean"));
    return v->get<bool>();
  }

  Result<std::string> str(std::string_view key, std::size_t max_bytes) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    if (!v->is_string()) return std::unexpected(invalid(field(key), "must be a string"));
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > max_bytes) {
      return std::unexpected(
          invalid(field(key), "longer than " + std::to_string(max_bytes) + " bytes"));
    }
    if (!validUtf8(s)) return std::unexpected(invalid(field(key), "is not valid UTF-8"));
    return s;
  }

  Result<const json*> array(std::string_view key, std::size_t max_items) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    if (!v->is_array()) return std::unexpected(invalid(field(key), "must be an array"));
    if (v->size() > max_items) {
      return std::unexpected(invalid(
          field(key),
          std::to_string(v->size()) + " items exceeds the limit of " + std::to_string(max_items)));
    }
    return v;
  }

  Result<Reader> object(std::string_view key) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    return open(*v, field(key));
  }

  // Rejects keys that were not read.
  Status finish() const {
    for (const auto& [k, v] : obj_.items()) {
      if (!seen_.contains(k)) return std::unexpected(invalid(field(k), "unknown field"));
    }
    return {};
  }

 private:
  const json& obj_;
  std::string path_;
  std::set<std::string, std::less<>> seen_;
};

// ---- Enum names ------------------------------------------------------------------------------

template <typename E, std::size_t N>
Result<E> parseEnum(const std::string& text, const schema::EnumNames<E, N>& table,
                    const std::string& path) {
  for (const auto& [e, name] : table) {
    if (text == name) return e;
  }
  std::string allowed;
  for (const auto& [e, name] : table) {
    if (!allowed.empty()) allowed += ", ";
    allowed += name;
  }
  return std::unexpected(invalid(path, "\"" + text + "\" is not one of: " + allowed));
}

template <typename E, std::size_t N>
std::string_view enumName(E e, const schema::EnumNames<E, N>& table) {
  for (const auto& [v, name] : table) {
    if (v == e) return name;
  }
  return "unknown";
}

// ---- Rules shared by the paths ---------------------------------------------------------------

// The effective bounds of a wire rule for a member of type M.
template <typename M>
constexpr std::uint64_t maxOf(schema::U w) {
  return std::min<std::uint64_t>(w.max, std::numeric_limits<M>::max());
}
template <typename M>
constexpr std::int64_t minOf(schema::I w) {
  return std::max<std::int64_t>(w.min, std::numeric_limits<M>::min());
}
template <typename M>
constexpr std::int64_t maxOf(schema::I w) {
  return std::min<std::int64_t>(w.max, std::numeric_limits<M>::max());
}

template <typename T>
constexpr bool isDocument() {
  if constexpr (std::is_same_v<T, Notice>) {
    return false;
  } else {
    return !schema::Schema<T>::kind.empty();
  }
}
template <typename T>
constexpr bool kIsDocument = isDocument<T>();

// A field path, built as text only when an error names it: a root ("RankReport", or the path a
// decoder read an object from), ".name" below a parent, or "[index]" below an array.
struct Path {
  const Path* parent = nullptr;
  std::string_view name;
  std::size_t index = 0;
  bool is_index = false;

  [[nodiscard]] std::string str() const {
    if (parent == nullptr) return std::string(name);
    std::string s = parent->str();
    if (is_index) {
      s += '[';
      s += std::to_string(index);
      s += ']';
    } else {
      s += '.';
      s += name;
    }
    return s;
  }
};

std::unexpected<Error> invalidAt(const Path& p, const std::string& what) {
  return std::unexpected(invalid(p.str(), what));
}

// ---- Validation (validate(), and the DOM decoder for checkedWhenRead structs) -----------------

Status checkName(const std::string& v, const Path& path, bool required) {
  if (v.empty()) {
    if (required) return invalidAt(path, "must not be empty");
    return {};
  }
  if (!isDnsSubdomain(v)) {
    return invalidAt(
        path, "\"" + v.substr(0, 64) + "\" is not a valid Kubernetes name (DNS-1123 subdomain)");
  }
  return {};
}

Status checkText(const std::string& v, const Path& path) {
  if (v.size() > kMaxTextBytes) {
    return invalidAt(path, "longer than " + std::to_string(kMaxTextBytes) + " bytes");
  }
  if (!validUtf8(v)) return invalidAt(path, "is not valid UTF-8");
  return {};
}

// Validation rules (report_schema.h). `whole` is the struct the field belongs to.
template <typename T, typename M>
Status checkRule(const T&, const M&, const Path&, schema::NoCheck) {
  return {};
}
template <typename T>
Status checkRule(const T&, const std::string& v, const Path& p, schema::DnsName c) {
  return checkName(v, p, c.required);
}
template <typename T>
Status checkRule(const T&, const std::string& v, const Path& p, schema::Text) {
  return checkText(v, p);
}
template <typename T>
Status checkRule(const T&, const std::string& v, const Path& p, schema::Short c) {
  if (v.size() > c.max_bytes) return invalidAt(p, "too long");
  return checkText(v, p);
}
template <typename T>
Status checkRule(const T&, const std::string& v, const Path& p, schema::Label c) {
  if ((c.non_empty && v.empty()) || v.size() > kMaxNameBytes || !validUtf8(v)) {
    return invalidAt(p, std::string(c.msg));
  }
  return {};
}
template <typename T>
Status checkRule(const T&, std::int64_t v, const Path& p, schema::UnixTime) {
  if (v <= 0) return invalidAt(p, "must be a positive Unix time in nanoseconds");
  return {};
}
template <typename T, typename M>
Status checkRule(const T&, const M& v, const Path& p, schema::Range c) {
  if (std::cmp_less(v, c.min) || std::cmp_greater(v, c.max))
    return invalidAt(p, std::string(c.msg));
  return {};
}
template <typename T, typename M>
Status checkRule(const T&, const M& v, const Path& p, schema::AtLeast c) {
  if (std::cmp_less(v, c.min)) return invalidAt(p, std::string(c.msg));
  return {};
}
template <typename T>
Status checkRule(const T&, double v, const Path& p, schema::FRange c) {
  if (!std::isfinite(v) || v < c.min || v > c.max) return invalidAt(p, std::string(c.msg));
  return {};
}
template <typename T, typename M>
Status checkRule(const T& whole, const M&, const Path& p, schema::Rule<T> c) {
  if (!c.ok(whole)) return invalidAt(p, std::string(c.msg));
  return {};
}
template <typename T, typename M, typename A, typename C>
Status checkRule(const T& whole, const M& v, const Path& p, schema::Both<A, C> c) {
  C4_RETURN_IF_ERROR(checkRule(whole, v, p, c.first));
  return checkRule(whole, v, p, c.second);
}

// Validation rules that already check UTF-8 (the wire rule of a text then need not again).
template <typename C>
constexpr bool kChecksUtf8 =
    std::is_same_v<C, schema::DnsName> || std::is_same_v<C, schema::Text> ||
    std::is_same_v<C, schema::Short> || std::is_same_v<C, schema::Label>;

template <typename T>
Status checkObject(const T& s, const Path& p);

// Wire rules, as validate() checks them (the decoders' texts).
template <typename M, bool kUtf8Checked>
Status checkWire(const M& v, const Path& p, schema::U w) {
  if (v > maxOf<M>(w)) {
    return invalidAt(p, std::to_string(v) + " exceeds the maximum " + std::to_string(maxOf<M>(w)));
  }
  return {};
}
template <typename M, bool kUtf8Checked>
Status checkWire(const M& v, const Path& p, schema::I w) {
  if (v < minOf<M>(w) || v > maxOf<M>(w)) {
    return invalidAt(p, std::to_string(v) + " is outside [" + std::to_string(minOf<M>(w)) + ", " +
                            std::to_string(maxOf<M>(w)) + "]");
  }
  return {};
}
template <typename M, bool kUtf8Checked>
Status checkWire(const M& v, const Path& p, schema::F w) {
  if (!std::isfinite(v) || v < w.min || v > w.max) {
    return invalidAt(p, "must be finite and within [" + std::to_string(w.min) + ", " +
                            std::to_string(w.max) + "]");
  }
  return {};
}
template <typename M, bool kUtf8Checked>
Status checkWire(const M&, const Path&, schema::B) {
  return {};
}
template <typename M, bool kUtf8Checked>
Status checkWire(const M& v, const Path& p, schema::S w) {
  if (v.size() > w.max_bytes) {
    return invalidAt(p, "longer than " + std::to_string(w.max_bytes) + " bytes");
  }
  if (!kUtf8Checked && !validUtf8(v)) return invalidAt(p, "is not valid UTF-8");
  return {};
}
template <typename M, bool kUtf8Checked, typename E, std::size_t N>
Status checkWire(const M& v, const Path& p, schema::En<E, N> w) {
  for (const auto& [e, name] : *w.names) {
    if (e == v) return {};
  }
  return invalidAt(p, "is not one of the names of its enum");
}
template <typename M, bool kUtf8Checked>
Status checkWire(const M& v, const Path& p, schema::Obj) {
  return checkObject(v, p);
}
template <typename M, bool kUtf8Checked>
Status checkWire(const M& v, const Path& p, schema::Arr w) {
  using Item = typename M::value_type;
  if (v.size() > w.max_items) {
    return invalidAt(p, w.too_many.empty()
                            ? std::to_string(v.size()) + " items exceeds the limit of " +
                                  std::to_string(w.max_items)
                            : std::string(w.too_many));
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const Path item{&p, {}, i, true};
    if constexpr (std::is_same_v<Item, Notice> || kIsDocument<Item>) {
      // A document nested in a batch is validated as a document; the error says where it sits.
      Status s;
      if constexpr (std::is_same_v<Item, Notice>) {
        s = std::visit([](const auto& n) { return validate(n); }, v[i]);
      } else {
        s = validate(v[i]);
      }
      if (!s) return std::unexpected(s.error().withContext(item.str()));
    } else {
      C4_RETURN_IF_ERROR(checkObject(v[i], item));
    }
  }
  return {};
}

// Every field (its validation rule, then its wire rule), then the struct's cross-field rules.
template <typename T>
Status checkObject(const T& s, const Path& p) {
  Status st;
  schema::forEachField<T>([&](const auto& f) {
    using C = std::remove_cvref_t<decltype(f.check)>;
    using M = typename std::remove_cvref_t<decltype(f)>::Member;
    const Path fp{&p, f.name};
    const M& v = s.*f.member;
    st = checkRule(s, v, fp, f.check);
    if (st) st = checkWire<M, kChecksUtf8<C>>(v, fp, f.wire);
    return st.has_value();
  });
  if (!st) return st;
  std::apply(
      [&](const auto&... rule) {
        (void)((rule.ok(s) || (st = invalidAt(p, std::string(rule.msg)), false)) && ...);
      },
      schema::Schema<T>::rules);
  return st;
}

template <typename T>
Status validateDocument(const T& d) {
  return checkObject(d, Path{nullptr, schema::Schema<T>::kind});
}

// ---- Encoding --------------------------------------------------------------------------------

template <typename T>
json objectJson(const T& s);
template <typename T>
json documentJson(const T& d);

template <typename M, typename W>
json valueJson(const M& v, W) {
  return json(v);
}
template <typename M, typename E, std::size_t N>
json valueJson(const M& v, schema::En<E, N> w) {
  return json(enumName(v, *w.names));
}
template <typename M>
json valueJson(const M& v, schema::Obj) {
  return objectJson(v);
}
template <typename M>
json valueJson(const M& v, schema::Arr) {
  using Item = typename M::value_type;
  json a = json::array();
  for (const auto& item : v) {
    if constexpr (std::is_same_v<Item, Notice>) {
      a.push_back(std::visit([](const auto& n) { return documentJson(n); }, item));
    } else if constexpr (kIsDocument<Item>) {
      a.push_back(documentJson(item));
    } else {
      a.push_back(objectJson(item));
    }
  }
  return a;
}

template <typename T>
json objectJson(const T& s) {
  json j = json::object();
  schema::forEachField<T>([&](const auto& f) {
    using M = typename std::remove_cvref_t<decltype(f)>::Member;
    if (f.optional && s.*f.member == M{}) return true;  // left out: older readers accept it
    j[std::string(f.name)] = valueJson(s.*f.member, f.wire);
    return true;
  });
  return j;
}

template <typename T>
json documentJson(const T& d) {
  json j = objectJson(d);
  j["v"] = kSchemaVersion;
  j["kind"] = std::string(schema::Schema<T>::kind);
  return j;
}

json messageJson(const Message& m) {
  return std::visit([](const auto& v) { return documentJson(v); }, m);
}

// ---- Decoding --------------------------------------------------------------------------------

template <typename T>
Result<T> readObject(Reader r);
template <typename T>
Result<T> readDocument(Reader& r);
Result<Notice> decodeNotice(const json& j, const std::string& path);

template <typename M>
Status readValue(Reader& r, std::string_view key, M& out, schema::U w) {
  C4_ASSIGN_OR_RETURN(auto v, r.u64(key, maxOf<M>(w)));
  out = static_cast<M>(v);
  return {};
}
template <typename M>
Status readValue(Reader& r, std::string_view key, M& out, schema::I w) {
  C4_ASSIGN_OR_RETURN(auto v, r.i64(key, minOf<M>(w), maxOf<M>(w)));
  out = static_cast<M>(v);
  return {};
}
template <typename M>
Status readValue(Reader& r, std::string_view key, M& out, schema::F w) {
  C4_ASSIGN_OR_RETURN(out, r.f64(key, w.min, w.max));
  return {};
}
template <typename M>
Status readValue(Reader& r, std::string_view key, M& out, schema::B) {
  C4_ASSIGN_OR_RETURN(out, r.boolean(key));
  return {};
}
template <typename M>
Status readValue(Reader& r, std::string_view key, M& out, schema::S w) {
  C4_ASSIGN_OR_RETURN(out, r.str(key, w.max_bytes));
  return {};
}
template <typename M, typename E, std::size_t N>
Status readValue(Reader& r, std::string_view key, M& out, schema::En<E, N> w) {
  C4_ASSIGN_OR_RETURN(auto s, r.str(key, w.max_bytes));
  C4_ASSIGN_OR_RETURN(out, parseEnum(s, *w.names, r.field(key)));
  return {};
}
template <typename M>
Status readValue(Reader& r, std::string_view key, M& out, schema::Obj) {
  C4_ASSIGN_OR_RETURN(Reader sub, r.object(key));
  C4_ASSIGN_OR_RETURN(out, readObject<M>(std::move(sub)));
  return {};
}

Status checkHeader(Reader& r, std::string_view expected_kind);

template <typename M>
Status readValue(Reader& r, std::string_view key, M& out, schema::Arr w) {
  using Item = typename M::value_type;
  C4_ASSIGN_OR_RETURN(const json* items, r.array(key, w.max_items));
  out.reserve(items->size());
  for (std::size_t i = 0; i < items->size(); ++i) {
    const std::string path = r.field(key) + "[" + std::to_string(i) + "]";
    if constexpr (std::is_same_v<Item, Notice>) {
      C4_ASSIGN_OR_RETURN(auto n, decodeNotice((*items)[i], path));
      out.push_back(std::move(n));
    } else if constexpr (kIsDocument<Item>) {
      C4_ASSIGN_OR_RETURN(Reader item, Reader::open((*items)[i], path));
      C4_RETURN_IF_ERROR(checkHeader(item, schema::Schema<Item>::kind));
      C4_ASSIGN_OR_RETURN(auto d, readDocument<Item>(item));
      out.push_back(std::move(d));
    } else {
      C4_ASSIGN_OR_RETURN(Reader item, Reader::open((*items)[i], path));
      C4_ASSIGN_OR_RETURN(auto o, readObject<Item>(std::move(item)));
      out.push_back(std::move(o));
    }
  }
  return {};
}

template <typename T>
Status readFields(Reader& r, T& out) {
  Status st;
  schema::forEachField<T>([&](const auto& f) {
    if (f.optional && !r.has(f.name)) return true;  // absent: the member's default
    st = readValue(r, f.name, out.*f.member, f.wire);
    return st.has_value();
  });
  return st;
}

// An object at r: its fields, no others, and (checkedWhenRead) its validation rules.
template <typename T>
Result<T> readObject(Reader r) {
  T out;
  C4_RETURN_IF_ERROR(readFields(r, out));
  C4_RETURN_IF_ERROR(r.finish());
  if constexpr (schema::Schema<T>::checked_when_read) {
    C4_RETURN_IF_ERROR(checkObject(out, Path{nullptr, r.path()}));
  }
  return out;
}

// A document at r, after its header: its fields, no others, and validate().
template <typename T>
Result<T> readDocument(Reader& r) {
  T out;
  C4_RETURN_IF_ERROR(readFields(r, out));
  C4_RETURN_IF_ERROR(r.finish());
  C4_RETURN_IF_ERROR(validate(out));
  return out;
}

Status checkHeader(Reader& r, std::string_view expected_kind) {
  C4_ASSIGN_OR_RETURN(auto v, r.i64("v", std::numeric_limits<std::int64_t>::min(),
                                    std::numeric_limits<std::int64_t>::max()));
  if (v != kSchemaVersion) {
    return std::unexpected(invalid(r.field("v"), "schema version " + std::to_string(v) +
                                                     " is not supported (this build speaks " +
                                                     std::to_string(kSchemaVersion) + ")"));
  }
  C4_ASSIGN_OR_RETURN(auto kind, r.str("kind", 64));
  if (kind != expected_kind) {
    return std::unexpected(invalid(
        r.field("kind"), "expected \"" + std::string(expected_kind) + "\", got \"" + kind + "\""));
  }
  return {};
}

// The alternative of Message whose kind is `kind`, read from r.
template <std::size_t K = 0>
Result<Message> readMessageOfKind(Reader& r, const std::string& kind) {
  if constexpr (K == std::variant_size_v<Message>) {
    return std::unexpected(
        invalid(r.field("kind"), "unknown message kind \"" + kind.substr(0, 64) + "\""));
  } else {
    using Alt = std::variant_alternative_t<K, Message>;
    if (kind == schema::Schema<Alt>::kind) {
      C4_ASSIGN_OR_RETURN(auto d, readDocument<Alt>(r));
      return Message{std::move(d)};
    }
    return readMessageOfKind<K + 1>(r, kind);
  }
}

Result<Message> decodeMessage(const json& j, const std::string& path) {
  C4_ASSIGN_OR_RETURN(Reader r, Reader::open(j, path));
  C4_ASSIGN_OR_RETURN(auto v, r.i64("v", std::numeric_limits<std::int64_t>::min(),
                                    std::numeric_limits<std::int64_t>::max()));
  if (v != kSchemaVersion) {
    return std::unexpected(invalid(r.field("v"), "schema version " + std::to_string(v) +
                                                     " is not supported (this build speaks " +
                                                     std::to_string(kSchemaVersion) + ")"));
  }
  C4_ASSIGN_OR_RETURN(auto kind, r.str("kind", 64));
  return readMessageOfKind(r, kind);
}

Result<Notice> decodeNotice(const json& j, const std::string& path) {
  C4_ASSIGN_OR_RETURN(Message m, decodeMessage(j, path));
  if (auto* p = std::get_if<ProgressNotice>(&m)) return Notice{std::move(*p)};
  if (auto* c = std::get_if<CheckpointNotice>(&m)) return Notice{std::move(*c)};
  if (auto* a = std::get_if<AnomalyNotice>(&m)) return Notice{std::move(*a)};
  return std::unexpected(invalid(path + ".kind", "a RankReport is not a notice"));
}

Result<NodeReport> decodeNodeReport(const json& j) {
  C4_ASSIGN_OR_RETURN(Reader r, Reader::open(j, "NodeReport"));
  C4_RETURN_IF_ERROR(checkHeader(r, "NodeReport"));
  return readDocument<NodeReport>(r);
}
// ---- Streaming CBOR decoding -----------------------------------------------------------------
//
// Decodes CBOR straight into the structs, for exactly this schema: maps with definite or
// indefinite length and definite-length text keys, unsigned/negative integers, float32/float64,
// booleans, definite-length text strings. It is a predicate with a by-product: it accepts only
// documents the DOM decoder above accepts, with the same value, and checks every rule that decoder
// checks (field set, types, ranges, sizes, UTF-8, names, validate()). Anything it does not accept
// (including the encodings it does not handle: duplicate keys, indefinite-length strings, half
// floats, non-canonical negative integers) goes to the DOM decoder, which then gives the verdict
// and the diagnostic naming the field. Valid input never takes the slow path; invalid input costs
// what it cost before. Iterative over a fixed schema: no recursion driven by the input.

class CborIn {
 public:
  explicit CborIn(std::span<const std::uint8_t> b) : p_(b.data()), end_(b.data() + b.size()) {}

  [[nodiscard]] bool atEnd() const { return p_ == end_; }
  [[nodiscard]] bool failed() const { return fail_; }
  bool fail() {
    fail_ = true;
    return false;
  }

  // A map or array header: the item count (definite) or `indefinite`.
  struct Seq {
    std::uint64_t left = 0;
    bool indefinite = false;
  };

  bool beginMap(Seq& s) { return begin(5, s, 2); }
  bool beginArray(Seq& s) { return begin(4, s, 1); }

  // True while `s` has another item (map: another key/value pair). Sets failed() on truncation.
  bool more(Seq& s) {
    if (s.indefinite) {
      if (p_ == end_) return fail();
      if (*p_ == 0xFF) {
        ++p_;
        return false;
      }
      return true;
    }
    if (s.left == 0) return false;
    --s.left;
    return true;
  }

  bool key(std::string_view& out) { return text(out, std::numeric_limits<std::size_t>::max()); }

  bool str(std::string& out, std::size_t max_bytes) {
    std::string_view v;
    if (!text(v, max_bytes) || !validUtf8(v)) return fail();
    out.assign(v);
    return true;
  }
  bool strView(std::string_view& out, std::size_t max_bytes) {
    if (!text(out, max_bytes) || !validUtf8(out)) return fail();
    return true;
  }

  bool u64(std::uint64_t& out, std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
    std::uint64_t arg = 0;
    if (!head(0, arg) || arg > max) return fail();
    out = arg;
    return true;
  }
  template <typename T>
  bool uint(T& out, std::uint64_t max = std::numeric_limits<T>::max()) {
    std::uint64_t v = 0;
    if (!u64(v, max)) return false;
    out = static_cast<T>(v);
    return true;
  }

  bool i64(std::int64_t& out, std::int64_t min = std::numeric_limits<std::int64_t>::min(),
           std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
    if (!integer(out) || out < min || out > max) return fail();
    return true;
  }
  template <typename T>
  bool sint(T& out, std::int64_t min, std::int64_t max) {
    std::int64_t v = 0;
    if (!i64(v, min, max)) return false;
    out = static_cast<T>(v);
    return true;
  }

  bool f64(double& out, double min, double max) {
    if (p_ == end_) return fail();
    const std::uint8_t ib = *p_;
    if (ib == 0xFA || ib == 0xFB) {
      const std::size_t n = ib == 0xFA ? 4 : 8;
      if (static_cast<std::size_t>(end_ - p_) < n + 1) return fail();
      ++p_;
      std::uint64_t bits = 0;
      for (std::size_t i = 0; i < n; ++i) bits = (bits << 8) | *p_++;
      if (n == 4) {
        out = static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
      } else {
        out = std::bit_cast<double>(bits);
      }
    } else if ((ib >> 5) == 0) {
      std::uint64_t u = 0;
      if (!u64(u)) return false;
      out = static_cast<double>(u);
    } else {
      std::int64_t i = 0;
      if (!integer(i)) return fail();
      out = static_cast<double>(i);
    }
    if (!std::isfinite(out) || out < min || out > max) return fail();
    return true;
  }

  bool boolean(bool& out) {
    if (p_ == end_ || (*p_ != 0xF4 && *p_ != 0xF5)) return fail();
    out = *p_++ == 0xF5;
    return true;
  }

 private:
  // An initial byte of major type `major` with a definite argument.
  bool head(unsigned major, std::uint64_t& arg) {
    bool indefinite = false;
    return headAny(major, arg, indefinite) && !indefinite;
  }
  bool headAny(unsigned major, std::uint64_t& arg, bool& indefinite) {
    if (p_ == end_ || (*p_ >> 5) != major) return false;
    const unsigned ai = *p_++ & 0x1F;
    indefinite = false;
    if (ai < 24) {
      arg = ai;
      return true;
    }
    if (ai == 31) {
      indefinite = true;
      return true;
    }
    if (ai > 27) return false;
    const std::size_t n = std::size_t{1} << (ai - 24);
    if (static_cast<std::size_t>(end_ - p_) < n) return false;
    arg = 0;
    for (std::size_t i = 0; i < n; ++i) arg = (arg << 8) | *p_++;
    return true;
  }
  // Major type 0 or 1 as a signed 64-bit value (negative values below INT64_MIN: not ours).
  bool integer(std::int64_t& out) {
    if (p_ == end_) return false;
    const unsigned major = *p_ >> 5;
    if (major != 0 && major != 1) return false;
    std::uint64_t arg = 0;
    if (!head(major, arg) ||
        arg > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return false;
    }
    out = major == 0 ? static_cast<std::int64_t>(arg) : -1 - static_cast<std::int64_t>(arg);
    return true;
  }
  bool text(std::string_view& out, std::size_t max_bytes) {
    std::uint64_t len = 0;
    if (!head(3, len) || len > static_cast<std::uint64_t>(end_ - p_) || len > max_bytes) {
      return fail();
    }
    out = std::string_view(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    return true;
  }
  bool begin(unsigned major, Seq& s, std::uint64_t min_bytes_per_item) {
    std::uint64_t n = 0;
    bool indefinite = false;
    if (!headAny(major, n, indefinite)) return fail();
    s.indefinite = indefinite;
    s.left = n;
    // Every item takes at least one byte (a pair two): a count the input cannot hold is false.
    if (!indefinite && n > static_cast<std::uint64_t>(end_ - p_) / min_bytes_per_item) {
      return fail();
    }
    return true;
  }

  const std::uint8_t* p_;
  const std::uint8_t* end_;
  bool fail_ = false;
};

// Index of `key` in `names`, or N.
template <std::size_t N>
std::size_t fieldIndex(const std::array<std::string_view, N>& names, std::string_view key) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == key) return i;
  }
  return N;
}

// Reads one map whose keys are all in `names`, each exactly once (`required` is the mask of the
// keys that must be present; the default: all), calling on_field(index) to read each value.
template <std::size_t N, typename F>
bool readObject(CborIn& in, const std::array<std::string_view, N>& names, F&& on_field,
                std::uint64_t* seen_out = nullptr,
                std::uint64_t required = (std::uint64_t{1} << N) - 1) {
  static_assert(N < 64);
  CborIn::Seq s;
  if (!in.beginMap(s)) return false;
  std::uint64_t seen = 0;
  while (in.more(s)) {
    std::string_view k;
    if (!in.key(k)) return false;
    const std::size_t i = fieldIndex(names, k);
    if (i == N || (seen & (std::uint64_t{1} << i)) != 0) return in.fail();
    seen |= std::uint64_t{1} << i;
    if (!on_field(i)) return in.fail();
  }
  if (in.failed()) return false;
  if (seen_out != nullptr) {
    *seen_out = seen;
    return true;
  }
  return (seen & required) == required || in.fail();
}

// Reads one array of at most `max_items` items, calling on_item() for each.
template <typename F>
bool readArray(CborIn& in, std::size_t max_items, F&& on_item) {
  CborIn::Seq s;
  if (!in.beginArray(s)) return false;
  if (!s.indefinite && s.left > max_items) return in.fail();
  std::size_t count = 0;
  while (in.more(s)) {
    if (++count > max_items || !on_item(s.indefinite ? 0 : s.left + 1)) return in.fail();
  }
  return !in.failed();
}

template <typename E, std::size_t N>
bool enumValue(CborIn& in, const std::array<std::pair<E, std::string_view>, N>& table, E& out,
               std::size_t max_bytes) {
  std::string_view s;
  if (!in.strView(s, max_bytes)) return false;
  for (const auto& [e, name] : table) {
    if (s == name) {
      out = e;
      return true;
    }
  }
  return in.fail();
}

template <typename T>
bool streamObject(CborIn& in, T& out);
template <typename T>
bool streamDocument(CborIn& in, T& out, std::string_view& kind_seen);
bool streamNotice(CborIn& in, Notice& out);

template <typename M>
bool streamValue(CborIn& in, M& out, schema::U w) {
  return in.uint(out, maxOf<M>(w));
}
template <typename M>
bool streamValue(CborIn& in, M& out, schema::I w) {
  return in.sint(out, minOf<M>(w), maxOf<M>(w));
}
inline bool streamValue(CborIn& in, double& out, schema::F w) {
  return in.f64(out, w.min, w.max);
}
inline bool streamValue(CborIn& in, bool& out, schema::B) {
  return in.boolean(out);
}
inline bool streamValue(CborIn& in, std::string& out, schema::S w) {
  return in.str(out, w.max_bytes);
}
template <typename M, typename E, std::size_t N>
bool streamValue(CborIn& in, M& out, schema::En<E, N> w) {
  return enumValue(in, *w.names, out, w.max_bytes);
}
template <typename M>
bool streamValue(CborIn& in, M& out, schema::Obj) {
  return streamObject(in, out);
}
template <typename M>
bool streamValue(CborIn& in, M& out, schema::Arr w) {
  using Item = typename M::value_type;
  return readArray(in, w.max_items, [&](std::uint64_t hint) {
    if (out.empty() && hint > 0) out.reserve(hint);
    Item& item = out.emplace_back();
    if constexpr (std::is_same_v<Item, Notice>) {
      return streamNotice(in, item);
    } else if constexpr (kIsDocument<Item>) {
      std::string_view kind;
      return streamDocument(in, item, kind);
    } else {
      return streamObject(in, item);
    }
  });
}

template <typename T>
inline constexpr auto kFieldNames = std::apply(
    [](const auto&... f) { return std::array<std::string_view, sizeof...(f)>{f.name...}; },
    schema::Schema<T>::fields);

// A document's keys: its header, then its fields.
template <typename T>
inline constexpr auto kDocumentKeys = std::apply(
    [](const auto&... f) {
      return std::array<std::string_view, 2 + sizeof...(f)>{"v", "kind", f.name...};
    },
    schema::Schema<T>::fields);

// The fields a reader needs (all but the optional ones), as a mask over kFieldNames<T> shifted by
// `first` (a document's header keys come first).
template <typename T>
constexpr std::uint64_t requiredMask(std::size_t first) {
  std::uint64_t mask = (std::uint64_t{1} << first) - 1;
  std::size_t i = first;
  schema::forEachField<T>([&](const auto& f) {
    if (!f.optional) mask |= std::uint64_t{1} << i;
    ++i;
    return true;
  });
  return mask;
}

template <typename T>
bool streamField(CborIn& in, T& out, std::size_t i) {
  return schema::visitField<T>(
      i, [&](const auto& f) { return streamValue(in, out.*f.member, f.wire); });
}

template <typename T>
bool streamObject(CborIn& in, T& out) {
  static constexpr std::uint64_t kRequired = requiredMask<T>(0);
  return readObject(
      in, kFieldNames<T>, [&](std::size_t i) { return streamField(in, out, i); }, nullptr,
      kRequired);
}

// A document of kind T; `kind_seen` is the kind it says it is, when it got that far.
template <typename T>
bool streamDocument(CborIn& in, T& out, std::string_view& kind_seen) {
  static constexpr std::uint64_t kRequired = requiredMask<T>(2);
  return readObject(
      in, kDocumentKeys<T>,
      [&](std::size_t i) {
        if (i == 0) {
          std::int64_t v = 0;
          return in.i64(v) && v == kSchemaVersion;
        }
        if (i == 1) {
          return in.strView(kind_seen, 64) && kind_seen == schema::Schema<T>::kind;
        }
        return streamField(in, out, i - 2);
      },
      nullptr, kRequired);
}

// One document of any of Variant's kinds. The kind may come last (the encoder writes keys in byte
// order), so the alternatives are tried in turn from the same position, the first (RankReport, in
// a Message) first; once a try has read the document's `kind`, only that alternative is tried.
template <typename Variant, std::size_t K = 0>
bool streamOneOf(CborIn& in, Variant& out, std::string_view& kind_seen) {
  if constexpr (K == std::variant_size_v<Variant>) {
    return in.fail();
  } else {
    using Alt = std::variant_alternative_t<K, Variant>;
    if (kind_seen.empty() || kind_seen == schema::Schema<Alt>::kind) {
      CborIn attempt = in;
      Alt value;
      std::string_view kind;
      if (streamDocument(attempt, value, kind)) {
        in = attempt;
        out = std::move(value);
        return true;
      }
      if (!kind.empty()) kind_seen = kind;
    }
    return streamOneOf<Variant, K + 1>(in, out, kind_seen);
  }
}

// Decodes one message into `out`; the caller's validate() finishes the checks.
bool streamMessage(CborIn& in, Message& out) {
  std::string_view kind;
  return streamOneOf(in, out, kind);
}

bool streamNotice(CborIn& in, Notice& out) {
  std::string_view kind;
  return streamOneOf(in, out, kind);
}

bool streamNodeReport(CborIn& in, NodeReport& out) {
  std::string_view kind;
  return streamDocument(in, out, kind);
}
template <typename T>
Result<std::vector<std::uint8_t>> toCbor(const json& j, std::size_t limit, const char* what) {
  std::vector<std::uint8_t> out;
  try {
    out = json::to_cbor(j);
  } catch (const std::exception& e) {
    return makeError(ErrorCode::kInvalidArgument, std::string(what) + ": " + e.what());
  }
  if (out.size() > limit) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": encoded size " + std::to_string(out.size()) +
                         " exceeds the limit of " + std::to_string(limit) + " bytes");
  }
  return out;
}

Result<std::string> toJsonText(const json& j, const char* what) {
  try {
    return j.dump();
  } catch (const std::exception& e) {
    return makeError(ErrorCode::kInvalidArgument, std::string(what) + ": " + e.what());
  }
}

}  // namespace

std::string_view directionName(Direction d) noexcept {
  return enumName(d, schema::kDirections);
}
std::string_view progressStateName(ProgressState s) noexcept {
  return enumName(s, schema::kProgressStates);
}
std::string_view anomalyKindName(AnomalyKind k) noexcept {
  return enumName(k, schema::kAnomalyKinds);
}

std::string_view messageKind(const Message& m) noexcept {
  switch (m.index()) {
    case 0:
      return "RankReport";
    case 1:
      return "ProgressNotice";
    case 2:
      return "CheckpointNotice";
    case 3:
      return "AnomalyNotice";
    default:
      return "unknown";
  }
}

bool isDnsSubdomain(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (alnum(c) || c == '-') continue;
    if (c == '.') {
      // Each dot-separated label must start and end alphanumeric.
      if (!alnum(name[i - 1]) || !alnum(name[i + 1])) return false;
      continue;
    }
    return false;
  }
  return true;
}

Status validate(const RankReport& r) {
  return validateDocument(r);
}

Status validate(const ProgressNotice& n) {
  return validateDocument(n);
}

Status validate(const CheckpointNotice& n) {
  return validateDocument(n);
}

Status validate(const AnomalyNotice& n) {
  return validateDocument(n);
}

Status validate(const Message& m) {
  return std::visit([](const auto& v) { return validate(v); }, m);
}

Status validate(const NodeReport& r) {
  return validateDocument(r);
}
Result<std::vector<std::uint8_t>> encodeCbor(const Message& m) {
  C4_RETURN_IF_ERROR(validate(m));
  return toCbor<Message>(messageJson(m), kMaxDatagramBytes, "encode message");
}

Result<Message> decodeMessageCbor(std::span<const std::uint8_t> bytes) {
  if (auto m = internal::decodeMessageCborStreaming(bytes)) return std::move(*m);
  return internal::decodeMessageCborDom(bytes);
}

Result<std::string> encodeJson(const Message& m) {
  C4_RETURN_IF_ERROR(validate(m));
  return toJsonText(messageJson(m), "encode message");
}

Result<Message> decodeMessageJson(std::string_view text) {
  C4_ASSIGN_OR_RETURN(json j, parseJson(text, kMaxDatagramBytes * 4, "message"));
  return decodeMessage(j, "Message");
}

Result<std::vector<std::uint8_t>> encodeCbor(const NodeReport& r) {
  C4_RETURN_IF_ERROR(validate(r));
  return toCbor<NodeReport>(documentJson(r), kMaxBatchBytes, "encode node report");
}

Result<NodeReport> decodeNodeReportCbor(std::span<const std::uint8_t> bytes) {
  if (auto r = internal::decodeNodeReportCborStreaming(bytes)) return std::move(*r);
  return internal::decodeNodeReportCborDom(bytes);
}

Result<std::string> encodeJson(const NodeReport& r) {
  C4_RETURN_IF_ERROR(validate(r));
  return toJsonText(documentJson(r), "encode node report");
}

Result<NodeReport> decodeNodeReportJson(std::string_view text) {
  C4_ASSIGN_OR_RETURN(json j, parseJson(text, kMaxBatchBytes * 4, "node report"));
  return decodeNodeReport(j);
}

namespace internal {

Result<Message> decodeMessageCborDom(std::span<const std::uint8_t> bytes) {
  C4_ASSIGN_OR_RETURN(json j, parseCbor(bytes, kMaxDatagramBytes, "message"));
  return decodeMessage(j, "Message");
}

Result<NodeReport> decodeNodeReportCborDom(std::span<const std::uint8_t> bytes) {
  C4_ASSIGN_OR_RETURN(json j, parseCbor(bytes, kMaxBatchBytes, "node report"));
  return decodeNodeReport(j);
}

std::optional<Message> decodeMessageCborStreaming(std::span<const std::uint8_t> bytes) {
  if (bytes.empty() || bytes.size() > kMaxDatagramBytes) return std::nullopt;
  CborIn in(bytes);
  Message m;
  if (!streamMessage(in, m) || !in.atEnd() || !validate(m).has_value()) return std::nullopt;
  return m;
}

std::optional<NodeReport> decodeNodeReportCborStreaming(std::span<const std::uint8_t> bytes) {
  if (bytes.empty() || bytes.size() > kMaxBatchBytes) return std::nullopt;
  CborIn in(bytes);
  NodeReport r;
  if (!streamNodeReport(in, r) || !in.atEnd() || !validate(r).has_value()) return std::nullopt;
  return r;
}

}  // namespace internal

}  // namespace c4::report
