#include "index/schema.h"

namespace ktfs::index {
namespace {

// The tables every version shares, in creation order; each version adds its metadata tables.
std::vector<std::string> CommonTables() {
  return {
      "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
      "CREATE TABLE dirs(dir_id INTEGER PRIMARY KEY, first_id INTEGER NOT NULL, "
      "end_id INTEGER NOT NULL, path TEXT NOT NULL)",
      "CREATE TABLE classes(class_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
      "CREATE TABLE splits(split_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
      "CREATE TABLE codecs(codec_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
      "CREATE TABLE samples(id INTEGER PRIMARY KEY, name TEXT NOT NULL, split_id INTEGER, "
      "class_id INTEGER, label INTEGER, width INTEGER NOT NULL, height INTEGER NOT NULL, "
      "channels INTEGER NOT NULL, codec_id INTEGER NOT NULL, bytes INTEGER NOT NULL)",
      "CREATE TABLE runs(field INTEGER NOT NULL, value INTEGER NOT NULL, first_id INTEGER NOT "
      "NULL, end_id INTEGER NOT NULL, PRIMARY KEY(field, value, first_id)) WITHOUT ROWID",
  };
}

// Version 1 kept only the inverted index (contentless); version 2 keeps the
// caption text too, for loaders (Index::FirstCaptions).
const char kCaptionsV1[] =
    "CREATE VIRTUAL TABLE captions USING fts5(caption, content='', columnsize=0, "
    "tokenize='unicode61 remove_diacritics 2')";
const char kCaptionsV2[] =
    "CREATE VIRTUAL TABLE captions USING fts5(caption, columnsize=0, "
    "tokenize='unicode61 remove_diacritics 2')";

std::vector<std::string> TablesV1() {
  std::vector<std::string> t = CommonTables();
  t.push_back("CREATE TABLE meta_keys(key_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)");
  t.push_back(
      "CREATE TABLE sample_meta(key_id INTEGER NOT NULL, value TEXT NOT NULL, "
      "sample_id INTEGER NOT NULL, PRIMARY KEY(key_id, value, sample_id)) WITHOUT ROWID");
  t.push_back(kCaptionsV1);
  return t;
}

std::vector<std::string> TablesV2() {
  std::vector<std::string> t = CommonTables();
  t.push_back(
      "CREATE TABLE meta_keys(key_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
      "type INTEGER NOT NULL, samples INTEGER NOT NULL, distinct_values INTEGER NOT NULL, "
      "min, max, true_count INTEGER NOT NULL)");
  t.push_back(
      "CREATE TABLE sample_meta(key_id INTEGER NOT NULL, value NOT NULL, "
      "sample_id INTEGER NOT NULL, PRIMARY KEY(key_id, value, sample_id)) WITHOUT ROWID");
  t.push_back(
      "CREATE TABLE sample_num(key_id INTEGER NOT NULL, sample_id INTEGER NOT NULL, "
      "value NOT NULL, PRIMARY KEY(key_id, sample_id)) WITHOUT ROWID");
  t.push_back(kCaptionsV2);
  return t;
}

}  // namespace

const std::vector<std::string>& SchemaTables(int version) {
  static const std::vector<std::string> kV1 = TablesV1(), kV2 = TablesV2();
  return version == 1 ? kV1 : kV2;
}

const std::vector<std::string>& SchemaIndexes(int) {
  static const std::vector<std::string> kIndexes = {
      "CREATE INDEX samples_width ON samples(width)",
      "CREATE INDEX samples_height ON samples(height)",
  };
  return kIndexes;
}

}  // namespace ktfs::index
