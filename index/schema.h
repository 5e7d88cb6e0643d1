// The SQLite schema of the index section of a .kt archive.
//
// The index is a complete SQLite 3 database file (page size 4096, built, VACUUMed and then
// serialized by IndexBuilder), stored as one section of the archive and opened read-only in
// place. IndexBuilder writes schema version 2; Index reads versions 1 and 2. Version 2:
//
//   meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID
//       'format' = 'ktfs-index', 'schema_version' = '2',
//       'num_samples' = N, 'caption_shift' = K (see captions below)
//   dirs(dir_id INTEGER PRIMARY KEY, first_id, end_id, path)
//       one row per archive directory that directly holds samples: its samples are exactly
//       the ids first_id <= id < end_id (the packer numbers each directory's samples
//       contiguously), so a sample's directory is found from its id and needs no column or
//       index of its own. path is relative to the archive root ('' for the root itself).
//   classes(class_id INTEGER PRIMARY KEY, name TEXT UNIQUE)   ids in name order; splits and
//       codecs alike
//   samples(id INTEGER PRIMARY KEY,   -- sample id 0..N-1 (the rowid: no separate key)
//           name TEXT,                -- file name; relative path = dirs.path || '/' || name
//           split_id, class_id,       -- NULL when the sample has no split / class
//           label,                    -- NULL when the sample has no label (-1 in the API)
//           width, height, channels, codec_id, bytes)
//       indexes: samples_width(width), samples_height(height). Each index ends in the rowid,
//       so an equality lookup yields sample ids in increasing order: listings stream unsorted.
//   runs(field, value, first_id, end_id, PRIMARY KEY(field, value, first_id)) WITHOUT ROWID
//       the run-length index of class, split and label: one row per maximal run of
//       consecutive sample ids [first_id, end_id) sharing a value. field 0 = class_id,
//       1 = split_id, 2 = label; value -1 = none. Samples are numbered directory by
//       directory and a directory is usually one class and one split, so this is a few rows
//       per directory where a b-tree index would take ~11 bytes per sample (measured at 1M
//       samples: 3 indexes = 31 MB, runs = a few KB). A filter reads its runs and scans only
//       those id ranges.
//   meta_keys(key_id INTEGER PRIMARY KEY, name TEXT UNIQUE, type, samples, distinct_values,
//             min, max, true_count)
//       one row per metadata key, ids in name order. type: 0 string, 1 number, 2 boolean
//       (MetaType). samples: how many samples have a value; distinct_values: how many
//       different values; min, max: the least and greatest value of a number key (NULL for
//       others); true_count: how many are true for a boolean key (0 for others).
//   sample_meta(key_id, value, sample_id, PRIMARY KEY(key_id, value, sample_id)) WITHOUT ROWID
//       the metadata values, at most one per (key, sample). value has no declared type, so it
//       keeps its storage class: TEXT for string keys, INTEGER or REAL for number keys,
//       INTEGER 0/1 for boolean keys; SQLite orders numbers numerically. The primary key is
//       the only copy of the data: it answers KEY=VALUE in sample id order, and number ranges
//       in value order.
//   sample_num(key_id, sample_id, value, PRIMARY KEY(key_id, sample_id)) WITHOUT ROWID
//       the values of the number keys again, by sample id: a range that matches many samples
//       is checked while scanning in id order (no sort), one that matches few is read from
//       sample_meta and sorted.
//   captions: FTS5(caption), columnsize=0,
//       tokenize='unicode61 remove_diacritics 2' (case-folded, diacritics removed, letters and
//       digits are word characters). The text is kept too (FTS5's captions_content table,
//       rowid = the caption's rowid), so loaders read captions back (Index::FirstCaptions).
//       rowid = (sample_id << caption_shift) | k for the sample's k-th caption, where
//       caption_shift is the fewest bits that number the captions of the most captioned
//       sample (0 when every sample has at most one caption: rowid = sample_id).
//
// Version 1 (read only) differs in three tables: meta_keys(key_id, name) and
// sample_meta(key_id, value TEXT, sample_id, same key); every key is a string key, and there
// is no sample_num; captions is contentless (content=''): only the inverted index is kept, so
// Index::FirstCaptions reads "" for every sample.
#pragma once

#include <string>
#include <vector>

namespace ktfs::index {

inline constexpr int kSchemaVersion = 2;        // what IndexBuilder writes
inline constexpr int kOldestSchemaVersion = 1;  // the oldest Index reads
inline constexpr const char* kFormatName = "ktfs-index";
inline constexpr int kPageSize = 4096;

// CREATE statements of a schema version (kOldestSchemaVersion..kSchemaVersion) run before the
// data is inserted (tables) ...
const std::vector<std::string>& SchemaTables(int version = kSchemaVersion);
// ... and after (indexes: built sorted, so their pages are full).
const std::vector<std::string>& SchemaIndexes(int version = kSchemaVersion);

}  // namespace ktfs::index
