"""The readers behind one interface (store/readers): rows to documents with counted rejects, the door's line,
the registry the listing consults, and glob rules."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contam_assets.store.documents import Reject, StreamFailure
from contam_assets.store.door import DoorError, check_units
from contam_assets.store.location import matches
from contam_assets.store.pool import list_pool, read_shard
from contam_assets.store.readers import is_jsonl, reader_for


def test_every_parquet_row_is_a_document_or_a_counted_reject(tmp_path):
    rows = [{"id": "a", "text": "good text"}, {"id": None, "text": None}, {"id": "c", "text": "   "},
            {"id": "d", "text": "x" * 50}, {"id": "e", "text": "fine again"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet", row_group_size=2)
    items = list(read_shard(tmp_path / "p.parquet", "p.parquet", "text", max_doc_bytes=40))
    assert [(type(i).__name__, i.line) for i in items] == [("Document", 0), ("Reject", 1), ("Reject", 2),
                                                           ("Reject", 3), ("Document", 4)]
    assert [i.reason.split(" ")[0] for i in items if isinstance(i, Reject)] == ["missing_content_key", "empty_text",
                                                                                "too_large"]
    assert items[0].doc_id == "a" and items[4].n_bytes == len("fine again")


def test_ids_fall_back_to_the_row_position_and_struct_fields_are_read(tmp_path):
    t = pa.table({"meta": pa.array([{"text": "one two", "lang": "en"}, {"text": "three", "lang": "fr"}])})
    pq.write_table(t, tmp_path / "s.parquet")
    docs = list(read_shard(tmp_path / "s.parquet", "s.parquet", "meta.text"))
    assert [(d.doc_id, d.text) for d in docs] == [("s.parquet:0", "one two"), ("s.parquet:1", "three")]


def test_arrow_files_and_streams_read_alike(tmp_path):
    t = pa.table({"id": ["x", "y"], "text": ["first doc", "second doc"]})
    with pa.OSFile(str(tmp_path / "f.arrow"), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t)
    with pa.OSFile(str(tmp_path / "s.arrow"), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    for name in ("f.arrow", "s.arrow"):
        assert [d.text for d in read_shard(tmp_path / name, name)] == ["first doc", "second doc"]


def test_a_broken_parquet_file_ends_with_a_stream_failure(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really parquet")
    items = list(read_shard(tmp_path / "bad.parquet", "bad.parquet"))
    assert len(items) == 1 and isinstance(items[0], StreamFailure) and items[0].kind == "read_error"


def test_the_registry_decides_what_is_a_unit(tmp_path):
    assert reader_for("a/b.jsonl.zst").name == "jsonl" and reader_for("x.parquet").name == "parquet"
    assert reader_for("x.feather").name == "arrow" and reader_for("notes.txt") is None
    assert is_jsonl("a.json.gz") and not is_jsonl("a.parquet")
    (tmp_path / "ds").mkdir()
    for name in ("state.json", "dataset_info.json"):
        (tmp_path / "ds" / name).write_text("{}")
    pa.ipc.new_stream(pa.OSFile(str(tmp_path / "ds" / "data-00000-of-00001.arrow"), "wb"), pa.schema([("text", pa.string())])).close()
    (tmp_path / "plain.json").write_text(json.dumps({"text": "a json shard, not metadata"}) + "\n")
    listing = list_pool(tmp_path)
    assert listing.shards == ["ds/data-00000-of-00001.arrow", "plain.json"]
    assert {e.path: e.reason.split(" ")[0] for e in listing.skipped} == {"ds/dataset_info.json": "datasets_metadata",
                                                                         "ds/state.json": "datasets_metadata"}


@pytest.mark.parametrize("rows, line", [
    ([{"id": 1, "content": "abc"}], "no 'text' in u.jsonl; it has: id, content — pass --content-key content"),
    ([{"id": 1, "n": 3}], "no 'text' in u.jsonl; it has: id, n — pass --content-key with the key of the text"),
    ([{"url": "https://example.org/a/long/address/of/the/page", "raw_content": "short body"}],
     "no 'text' in u.jsonl; it has: url, raw_content — pass --content-key raw_content"),
    ([{"id": 1, "title": "short", "page": "a much longer body of text"}],
     "no 'text' in u.jsonl; it has: id, title, page — pass --content-key page"),
])
def test_the_door_line(tmp_path, rows, line):
    (tmp_path / "u.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DoorError) as exc:
        check_units({"u.jsonl": tmp_path / "u.jsonl"}, "text")
    assert str(exc.value) == line


def test_the_door_passes_a_key_found_in_a_later_sampled_line_and_a_file_of_no_objects(tmp_path):
    (tmp_path / "late.jsonl").write_text(json.dumps({"x": 1}) + "\n" + json.dumps({"text": "here"}) + "\n")
    (tmp_path / "junk.jsonl").write_text("not json\n")
    pq.write_table(pa.table({"meta": pa.array([{"text": "t"}])}), tmp_path / "s.parquet")
    check_units({"late.jsonl": tmp_path / "late.jsonl", "junk.jsonl": tmp_path / "junk.jsonl"}, "text")
    check_units({"s.parquet": tmp_path / "s.parquet"}, "meta.text")
    with pytest.raises(DoorError, match=r"no 'text' in s.parquet; it has: meta.text — pass --content-key meta.text"):
        check_units({"s.parquet": tmp_path / "s.parquet"}, "text")


def test_glob_rules():
    assert matches("other.jsonl", "**/*.jsonl") and matches("a/b/c.jsonl", "**/*.jsonl")
    assert not matches("a/c.jsonl", "*.jsonl") and matches("a/c.jsonl", "a/*.jsonl")
    assert matches("d/x-1.parquet", "d/x-[0-9].parquet") and not matches("d/x-a.parquet", "d/x-[!a-z].parquet")
