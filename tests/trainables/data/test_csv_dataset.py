"""``dataset.name: csv`` (open-metric-learning's CSV) and ``python -m study.data export-csv``: a built-in dataset
exported and read back gives the loader's own split; each malformed row is one line naming it."""

from __future__ import annotations

import numpy as np
import pytest

from harness.fake_data import write_cifar10, write_cub, write_inshop
from study.data import FetchError
from study.data._export import export_csv
from study.intake.spec_reader import parse_spec
from trainables.data import check_dataset, load_dataset
from trainables.schema.errors import DataError
from trainables.schema.spec import DatasetSpec


def _csv_splits(root, annotations):
    return load_dataset(DatasetSpec(name="csv", root=str(root), annotations=annotations, image_size=16), seed=0)


def test_cub_exported_and_read_back_is_the_same_split(tmp_path):
    write_cub(tmp_path, n_classes=6, per_class=3)
    path, n = export_csv("cub200", tmp_path)
    assert (path, n) == (tmp_path / "cub200_oml.csv", 18)
    lines = path.read_text().splitlines()
    assert lines[0] == "label,path,split,is_query,is_gallery"
    assert lines[1].startswith("1,CUB_200_2011/images/001.Bird_1/") and lines[1].endswith(",train,,")
    assert lines[-1].endswith(",validation,True,True")
    direct = load_dataset(DatasetSpec(name="cub200", root=str(tmp_path), image_size=16), seed=0)
    via_csv = _csv_splits(tmp_path, "cub200_oml.csv")
    for a, b in ((direct.train, via_csv.train), (direct.test, via_csv.test)):
        assert [f"CUB_200_2011/{p}" for p in a.items] == list(b.items)
        np.testing.assert_array_equal(a.labels, b.labels)
    assert via_csv.gallery is None  # each query searched among the other test images
    x = via_csv.train.load_item(via_csv.train.items[0])
    assert x.size == direct.train.load_item(direct.train.items[0]).size


def test_inshop_keeps_its_query_and_gallery(tmp_path):
    write_inshop(tmp_path, n_train=3, n_test=3, per_item=4)
    export_csv("inshop", tmp_path, tmp_path / "inshop.csv")
    direct = load_dataset(DatasetSpec(name="inshop", root=str(tmp_path), image_size=16), seed=0)
    via_csv = _csv_splits(tmp_path, "inshop.csv")
    prefix = "In-shop Clothes Retrieval Benchmark/"
    assert direct.gallery is not None and via_csv.gallery is not None
    for a, b in ((direct.train, via_csv.train), (direct.test, via_csv.test), (direct.gallery, via_csv.gallery)):
        assert [prefix + p for p in a.items] == list(b.items)
        np.testing.assert_array_equal(a.labels, b.labels)


def test_cifar10_has_no_files_to_list(tmp_path):
    write_cifar10(tmp_path)
    with pytest.raises(FetchError, match="inside pickles"):
        export_csv("cifar10", tmp_path)


_GOOD = "label,path,split,is_query,is_gallery\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("x,a.jpg,train,,\n", r"row at line 2: label 'x' is not an integer"),
        ("1,a.jpg,test,True,True\n", r"row at line 2: split 'test' is not train or validation"),
        ("1,a.jpg,validation,maybe,True\n", r"row at line 2: is_query 'maybe' is not a boolean"),
        (
            "1,a.jpg,validation,False,False\n",
            r"row at line 2: a validation row must be a query, a gallery image or both",
        ),
        ("1,a.jpg,train\n", r"row at line 2: 3 fields, the header has 5"),
        ("1,a.jpg,train,,,extra\n", r"row at line 2: 6 fields, the header has 5"),
        ("1,,train,,\n", r"row at line 2: empty path"),
    ],
)
def test_a_bad_row_is_one_line_naming_it(tmp_path, body, message):
    rows = "1,a.jpg,train,,\n2,b.jpg,validation,True,True\n"
    (tmp_path / "d.csv").write_text(_GOOD + body + rows)
    with pytest.raises(DataError, match=message + r".*: .*d\.csv;") as err:
        check_dataset(DatasetSpec(name="csv", root=str(tmp_path), annotations="d.csv"))
    assert "\n" not in str(err.value)


def test_header_boxes_mixed_roles_and_missing_images(tmp_path):
    write_cub(tmp_path, n_classes=4, per_class=2)
    path, _ = export_csv("cub200", tmp_path)
    lines = path.read_text().splitlines()

    def check(text):
        (tmp_path / "d.csv").write_text(text)
        check_dataset(DatasetSpec(name="csv", root=str(tmp_path), annotations="d.csv"))

    with pytest.raises(DataError, match="the header lacks column\\(s\\) is_gallery"):
        check("label,path,split,is_query\n1,a.jpg,train,\n")
    with pytest.raises(DataError, match="boxes need all of x_1, y_1, x_2, y_2, but the header has x_1, y_1"):
        check(_GOOD.strip() + ",x_1,y_1\n")
    boxed = [lines[0] + ",category,x_1,y_1,x_2,y_2"] + [line + ",bird,0,0,10,10" for line in lines[1:]]
    check("\n".join(boxed) + "\n")  # optional columns are read
    boxed[2] = lines[2] + ",bird,5,0,3,10"
    with pytest.raises(DataError, match="row at line 3: box must have 0 <= x_1 < x_2"):
        check("\n".join(boxed) + "\n")
    mixed = [*lines[:-2], lines[-2].replace("True,True", "True,False"), lines[-1]]
    first_validation_line = 1 + next(i for i, line in enumerate(lines) if ",validation," in line)
    with pytest.raises(DataError, match=f"row at line {first_validation_line} is both query and gallery while other"):
        check("\n".join(mixed) + "\n")
    with pytest.raises(DataError, match="missing: .*nope.jpg"):
        check(_GOOD + "1,nope.jpg,train,,\n2,nope2.jpg,validation,True,True\n")
    duplicated = [*boxed[:2], boxed[1].replace(",0,0,10,10", ",1,1,10,10")]
    with pytest.raises(DataError, match="row at line 3: CUB_200_2011/images/.* appears again with another box"):
        check("\n".join(duplicated) + "\n")
    with pytest.raises(DataError, match="no such annotations file"):
        check_dataset(DatasetSpec(name="csv", root=str(tmp_path), annotations="absent.csv"))


def test_a_box_crops_its_image(tmp_path):
    from PIL import Image

    write_cub(tmp_path, n_classes=4, per_class=2)
    path, _ = export_csv("cub200", tmp_path)
    lines = path.read_text().splitlines()
    boxed = [lines[0] + ",x_1,y_1,x_2,y_2"] + [line + ",2,3,12.2,9" for line in lines[1:]]
    (tmp_path / "boxed.csv").write_text("\n".join(boxed) + "\n")
    data = _csv_splits(tmp_path, "boxed.csv")
    item = data.test.items[0]
    whole = np.asarray(Image.open(tmp_path / item).convert("RGB"))
    np.testing.assert_array_equal(np.asarray(data.test.load_item(item)), whole[3:9, 2:12])  # rows y, columns x


def test_spec_keys(tmp_path):
    from trainables.schema.errors import SpecError

    with pytest.raises(SpecError, match="dataset.annotations is required by csv and applies to csv only"):
        parse_spec({"name": "s", "family": "ms", "dataset": {"name": "csv", "root": str(tmp_path)}})
    with pytest.raises(SpecError, match="dataset.annotations is required by csv"):
        parse_spec({"name": "s", "family": "ms", "dataset": {"name": "sop", "root": "x", "annotations": "a.csv"}})
    spec = parse_spec({"name": "s", "family": "ms", "dataset": {"name": "csv", "root": "d", "annotations": "a.csv"}})
    assert spec.dataset.annotations == "a.csv"
