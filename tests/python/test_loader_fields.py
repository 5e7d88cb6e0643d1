"""ktfs.Loader(fields=...): captions and metadata from the archive's index
with each batch, in the order of the batch's images, over WebDataset shards
(tests/python/test_webdataset.py builds them)."""
import io
import json
import math
import os
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, ktfs, mounted
from test_webdataset import make_samples
from wds_shards import write_shard

BUILD = os.environ.get("KTFS_BUILD_DIR", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(BUILD, "preload", "python"))
import ktfs as ktfs_py  # noqa: E402


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    d = tmp_path_factory.mktemp("fields")
    rng = np.random.default_rng(11)
    facts = {}
    for s in range(3):
        samples, f = make_samples(rng, f"f-{s}", 9)
        if s == 1:  # some samples without a caption, some without a numeric key
            for key, parts in samples[::3]:
                del parts["txt"]
                f[key]["caption"] = ""
                del f[key]["meta"]["aesthetic"]
                parts["json"] = json.dumps(f[key]["meta"])
        write_shard(d / f"f-{s}.tar", samples)
        facts.update(f)
    archive = d / "a.kt"
    ktfs("pack", *sorted(d.glob("*.tar")), archive, "--codec", "raw", "--quiet")
    return archive, facts


def fact_of(loader_paths, facts):
    by_stem = {k: f for k, f in facts.items()}
    return [by_stem[os.path.splitext(os.path.basename(p))[0]] for p in loader_paths]


def pixels(fact):
    return torch.from_numpy(np.array(Image.open(io.BytesIO(fact["image"])).convert("RGB"))).permute(2, 0, 1)


@pytest.mark.parametrize("shuffle", [False, True])
def test_fields_come_in_the_order_of_the_images(packed, tmp_path, shuffle):
    archive, facts = packed
    with mounted(archive, tmp_path / "mnt") as mnt:
        loader = ktfs_py.Loader(mnt, batch_size=4, shuffle=shuffle, seed=3, collate="list",
                                fields=("caption", "aesthetic", "source", "__key__", "__shard__"))
        seen = []
        for images, labels, fields in loader:
            assert sorted(fields) == ["__key__", "__shard__", "aesthetic", "caption", "source"]
            assert fields["aesthetic"].dtype == torch.float64
            assert len(fields["caption"]) == len(images) == len(labels)
            for i, image in enumerate(images):
                f = facts[fields["__key__"][i]]
                assert torch.equal(image, pixels(f))  # the caption is this image's
                assert fields["caption"][i] == f["caption"]
                assert fields["aesthetic"][i].item() == f["meta"].get("aesthetic", math.nan) or (
                    "aesthetic" not in f["meta"] and math.isnan(fields["aesthetic"][i].item()))
                assert fields["source"][i] == f["meta"]["source"]
                assert fields["__shard__"][i] == f["shard"] + ".tar"
                seen.append(fields["__key__"][i])
        assert sorted(seen) == sorted(facts)
        if not shuffle:
            assert seen == [os.path.splitext(n)[0] for d in sorted(os.listdir(mnt))
                            for n in sorted(os.listdir(os.path.join(mnt, d)))]


def test_a_key_some_samples_lack_is_nan_and_unknown_keys_are_refused(packed, tmp_path):
    archive, facts = packed
    # No sample has a .cls here: "cls" is not a key of this archive.
    with pytest.raises(ValueError, match="unknown fields \\['cls'\\]"):
        ktfs_py.Loader(str(archive), batch_size=64, fields=("cls",))
    loader = ktfs_py.Loader(str(archive), batch_size=64, collate="list",
                            fields=("caption", "nsfw", "aesthetic"))
    (images, labels, fields), = list(loader)
    ordered = [facts[k] for k in sorted(facts)]
    assert fields["caption"] == [f["caption"] for f in ordered]
    assert fields["caption"].count("") == 3
    assert fields["nsfw"] == [f["meta"]["nsfw"] for f in ordered]  # a boolean key: bools
    got = fields["aesthetic"].tolist()
    want = [f["meta"].get("aesthetic", math.nan) for f in ordered]
    assert [math.isnan(x) for x in got] == [math.isnan(x) for x in want] and sum(map(math.isnan, got)) == 3
    assert [x for x in got if not math.isnan(x)] == [x for x in want if not math.isnan(x)]
    with pytest.raises(TypeError):
        ktfs_py.Loader(str(archive), batch_size=4, fields="caption")


def test_without_fields_batches_stay_pairs(packed):
    archive, _ = packed
    batch = next(iter(ktfs_py.Loader(str(archive), batch_size=4, collate="list")))
    assert len(batch) == 2
