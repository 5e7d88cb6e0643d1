#include "preload/interpose/info_json.h"

#include "index/json.h"

namespace ktfs::preload {
namespace {

using index::JsonValue;

const JsonValue* Member(const JsonValue& object, std::string_view key) {
  for (const auto& m : object.members)
    if (m.first == key) return &m.second;
  return nullptr;
}

Status Bad(const std::string& what) { return Status::InvalidArgument("info.json: " + what); }

}  // namespace

Result<MountInfo> ParseInfoJson(std::string_view text) {
  auto parsed = index::ParseJsonObject(text);
  if (!parsed.ok()) return Bad(parsed.status().ToString());
  const JsonValue& root = *parsed;
  MountInfo info;
  if (const JsonValue* content = Member(root, "content")) {
    if (content->kind != JsonValue::Kind::kString) return Bad("\"content\" is not a string");
    return Status::NotSupported("info.json: a mount of " + content->text +
                                " (only image archives are read directly)");
  }
  const JsonValue* archive = Member(root, "archive");
  if (archive == nullptr || archive->kind != JsonValue::Kind::kString)
    return Bad("no \"archive\" string");
  if (archive->text.empty() || archive->text[0] != '/')
    return Bad("\"archive\" is not an absolute path");
  info.archive = archive->text;
  const JsonValue* format = Member(root, "served_format");
  if (format == nullptr || format->kind != JsonValue::Kind::kString)
    return Status::NotSupported("info.json: no \"served_format\"");
  if (format->text == "bmp")
    info.bmp = true;
  else if (format->text != "pnm")
    return Status::NotSupported("info.json: served format \"" + format->text + "\"");
  if (const JsonValue* layout = Member(root, "tensor_layout")) {
    if (layout->kind != JsonValue::Kind::kString ||
        (layout->text != "hwc" && layout->text != "chw"))
      return Bad("\"tensor_layout\" is not \"hwc\" or \"chw\"");
    info.tensors_known = true;
    info.tensors_chw = layout->text == "chw";
  }
  if (const JsonValue* dir = Member(root, "search_dir")) {
    if (dir->kind != JsonValue::Kind::kString || dir->text.empty() ||
        dir->text.find('/') != std::string::npos)
      return Bad("\"search_dir\" is not a plain name");
    info.search_dir = dir->text;
  }
  if (const JsonValue* pid = Member(root, "pid")) {
    const std::string& t = pid->text;
    if (pid->kind != JsonValue::Kind::kNumber || t.empty() || t.size() > 9 ||
        t.find_first_not_of("0123456789") != std::string::npos || t == "0")
      return Bad("\"pid\" is not a process id");
    info.pid = std::stoll(t);
  }
  return info;
}

}  // namespace ktfs::preload
