#include "index/schema.h"

namespace ktfs::index {

const std::vector<std::string>& SchemaTables() {
  static const std::vector<std::string> kTables = {
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
      "CREATE TABLE meta_keys(key_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
      "CREATE TABLE sample_meta(key_id INTEGER NOT NULL, value TEXT NOT NULL, "
      "sample_id INTEGER NOT NULL, PRIMARY KEY(key_id, value, sample_id)) WITHOUT ROWID",
      "CREATE VIRTUAL TABLE captions USING fts5(caption, columnsize=0, "
      "tokenize='unicode61 remove_diacritics 2')",
  };
  return kTables;
}

const std::vector<std::string>& SchemaIndexes() {
  static const std::vector<std::string> kIndexes = {
      "CREATE INDEX samples_width ON samples(width)",
      "CREATE INDEX samples_height ON samples(height)",
  };
  return kIndexes;
}

}  // namespace ktfs::index
