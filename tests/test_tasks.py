from __future__ import annotations

import json

import pytest

from ego2web_replay.errors import TaskFileError
from ego2web_replay.tasks import load_tasks, parse_timestamp


def test_parse_timestamp():
    assert parse_timestamp("00:55") == 55
    assert parse_timestamp("01:02:03") == 3723
    assert parse_timestamp("12.5") == 12.5
    assert parse_timestamp(3) == 3.0
    with pytest.raises(ValueError):
        parse_timestamp("soon")


def test_load_jsonl_with_ego2web_names(tmp_path):
    f = tmp_path / "tasks.jsonl"
    rows = [
        {"task_id": "T1", "task": "Find the snack", "web_url": "https://shop.example/",
         "timestamps": "00:55-01:00", "allowed_domains": "shop.example", "must_match": ["red", "Lays"],
         "difficulty": "hard", "why_video_dependent": "brand only visible in video",
         "reference_actions": [{"kind": "goto", "url": "https://shop.example/item/1"},
                               {"kind": "answer", "answer": "150 kcal"}]},
        {"id": "T2", "instruction": "Open wiki", "start_url": "http://127.0.0.1:1/",
         "evidence": [{"start": "0:01", "end": 3}, [4, 5]]},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    suite = load_tasks(f)
    assert [t.id for t in suite] == ["T1", "T2"]
    t1 = suite.get("T1")
    assert t1.instruction == "Find the snack"
    assert t1.start_url == "https://shop.example/"
    assert t1.evidence[0].start == 55 and t1.evidence[0].end == 60
    assert t1.allowed_domains == ["shop.example"]
    assert t1.difficulty == "hard"
    assert t1.reference_actions[1].answer == "150 kcal"
    assert [(e.start, e.end) for e in suite.get("T2").evidence] == [(1, 3), (4, 5)]
    assert len(suite.sha256) == 64


def test_load_json_object_with_tasks(tmp_path):
    f = tmp_path / "suite.json"
    f.write_text(json.dumps({"tasks": [{"id": "a", "instruction": "x", "start_url": "http://a/"}]}))
    assert load_tasks(f).tasks[0].id == "a"


@pytest.mark.parametrize(
    "content, expect",
    [
        ('{"id": "T1", "instruction": "x"}\n', "line 1 (id 'T1'): field 'start_url'"),
        ('{"id": "T1", "instruction": "x", "start_url": "ftp://a"}\n', "start_url must be an http(s) URL"),
        ('{"id": "T1", "instruction": "x", "start_url": "http://a/", "reference_actions": [{"kind": "goto"}]}\n',
         "field 'reference_actions.0'"),
        ('{"id": "T1", "instruction": "x", "start_url": "http://a/"}\n{"id": "T1", "instruction": "y", "start_url": "http://a/"}\n',
         "duplicate task id"),
        ("{not json\n", "line 1: not valid JSON"),
        ('{"id": "T 1", "instruction": "x", "start_url": "http://a/"}\n', "field 'id'"),
        ('{"id": "T1", "instruction": "x", "start_url": "http://a/", "timestamps": "01:00-00:10"}\n', "field 'evidence.0'"),
    ],
)
def test_bad_task_files_name_file_task_and_field(tmp_path, content, expect):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(TaskFileError) as e:
        load_tasks(f)
    msg = str(e.value)
    assert str(f) in msg and expect in msg
    assert "\n" not in msg


def test_missing_task_file(tmp_path):
    with pytest.raises(TaskFileError, match="not found"):
        load_tasks(tmp_path / "nope.jsonl")
