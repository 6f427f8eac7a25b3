"""daliloader/classes.py: ClassMap, how mask pixels become class indices and back: CamVid's
class_dict.csv (malformed lines named), id maps with remaps and ignore indices, palettes and colorize, the
exact colour tables, the wide ignore index past 255 classes, repeated names refused; to_mask the inverse of
map_mask.
"""

from pathlib import Path

import numpy as np
import pytest

import daliloader as dl
from daliloader.classes import CATALOGUE
from daliloader.errors import DataError


def test_camvid_csv(tmp_path):
    p = tmp_path / "class_dict.csv"
    p.write_text("name,r,g,b\nSky,128,128,128\nRoad,128,64,128\nVoid,0,0,0\n")
    cm = dl.ClassMap.from_csv(p)
    assert cm.kind == "rgb" and cm.names == ("Sky", "Road", "Void") and cm.num_classes == 3
    mask = np.array([[[128, 128, 128], [128, 64, 128]], [[0, 0, 0], [1, 2, 3]]], np.uint8)
    assert cm.map_mask(mask).tolist() == [[0, 1], [2, 255]]


@pytest.mark.parametrize("text, where", [
    ("name,r,g,b\nSky,128,128\n", ":2: expected 4 fields"),
    ("name,r,g,b\nSky,128,128,128\nRoad,12,x,3\n", ":3: r,g,b must be integers"),
    ("name,r,g,b\nSky,128,128,300\n", ":2: r,g,b must lie in 0-255"),
    ("label,red,green,blue\nSky,1,2,3\n", ":1: expected the header"),
    ("", "the file is empty"),
    ("name,r,g,b\nA,1,2,3\nB,1,2,3\n", "colour [1, 2, 3] is given to more than one class"),
])
def test_malformed_csv_names_the_line(tmp_path, text, where):
    p = tmp_path / "class_dict.csv"
    p.write_text(text)
    with pytest.raises(DataError, match=None) as e:
        dl.ClassMap.from_csv(p)
    assert where in str(e.value)
    assert str(p) in str(e.value) or "colour" in where


def test_missing_csv():
    with pytest.raises(DataError, match="does not exist"):
        dl.ClassMap.from_csv("/nonexistent/class_dict.csv")


def test_palette_and_colorize():
    cm = dl.ClassMap.from_palette([(255, 0, 0), (0, 255, 0)], ["a", "b"])
    labels = np.array([[0, 1, 255]])
    assert cm.colorize(labels).tolist() == [[[255, 0, 0], [0, 255, 0], cm.ignore_colour().tolist()]]
    assert cm.ignore_colour().tolist() == [255, 255, 255]  # the farthest from red and green


def test_ids_with_remap_and_ignore():
    cm = dl.ClassMap.cityscapes()
    assert cm.kind == "id" and cm.num_classes == 19 and cm.ignore_index == 255
    ids = np.array([[7, 8, 0], [33, 34, 255]], np.uint8)
    assert cm.map_mask(ids).tolist() == [[0, 1, 255], [18, 255, 255]]


def test_ids_from_count():
    cm = dl.ClassMap.from_ids(3)
    assert cm.map_mask(np.array([[0, 1, 2, 3, 200]], np.uint8)).tolist() == [[0, 1, 2, 255, 255]]


@pytest.mark.parametrize("table", [
    {i: i for i in range(256)},  # 256 classes, or 255 and the ignore value?
    {0: 255, **{k: k - 1 for k in range(1, 301)}},  # ADE20K's convention over 300 classes: 0 merged into class 255
])
def test_a_remap_whose_classes_reach_255_says_what_255_is(table):
    """Without an ignore index, 255 in a remap is the ignore value, unless the other classes reach it: then
    it was read one way or the other silently (an outside review); now it is asked, and either answer
    loads."""
    with pytest.raises(DataError, match=r"maps id\(s\) .* to 255, and its other classes reach \d+: is 255 a class"):
        dl.ClassMap.from_ids(table)
    wide = dl.ClassMap.from_ids(table, ignore_index=65535)
    assert wide.ignore_index == 65535 and wide.map_mask(np.array([[255]], np.uint16)).tolist() == [[table[255]]]
    assert dl.ClassMap.from_ids({0: 255, 1: 0, 2: 1}).ignore_index == 255  # few classes: 255 is the ignore value


@pytest.mark.parametrize("bad, match", [
    ({0: 0, 1: 2}, "without gaps"),
    ({70000: 0}, "outside 0-65535"),
    (0, "must be in 1..65535, got 0"),
])
def test_bad_id_maps(bad, match):
    with pytest.raises(DataError, match=match):
        dl.ClassMap.from_ids(bad)


def test_ignore_index_must_not_be_a_class():
    with pytest.raises(DataError, match="ignore_index"):
        dl.ClassMap.from_ids(10, ignore_index=5)


@pytest.mark.parametrize("table, ignore, match", [
    ({7: 0, 26: 1}, 1, r"ignore_index=1 is also the class that the table gives to id\(s\) 26: they would load as "
                       r"ignored.*e.g. \{26: 255\}"),
    (3, 0, r"ignore_index=0 with 3 classes: the ignore index is no class, so it must lie in 3..65535.*"
           r"ClassMap.from_ids\(\{0: 255, 1: 0, 2: 1, ...\}\)"),
])
def test_an_ignore_index_that_is_a_class_is_refused_saying_why(table, ignore, match):
    """Issue 27: {7: 0, 26: 1} with ignore_index=1 made class 26 ignored without a word; ignore_index=0 with a
    class count said "missing [0]"."""
    with pytest.raises(DataError, match=match):
        dl.ClassMap.from_ids(table, ignore_index=ignore)
    ade_like = dl.ClassMap.from_ids({0: 255, 1: 0, 2: 1})  # the way out the message gives works
    assert ade_like.ignore_index == 255 and ade_like.map_mask(np.array([[0, 1, 2]], np.uint8)).tolist() == [[255, 0, 1]]


def test_more_than_255_colours_take_the_wide_ignore_index(tmp_path):
    """Issue 27: a 300-colour class_dict.csv was refused ("ignore_index must be >= 300 ... got 255"), where id
    maps switch to 65535 above 255 classes; colour maps now do too."""
    colours = [(i // 20 * 10, 7, i % 20 * 10) for i in range(300)]
    csv = tmp_path / "class_dict.csv"
    csv.write_text("name,r,g,b\n" + "".join(f"c{i},{r},{g},{b}\n" for i, (r, g, b) in enumerate(colours)))
    cm = dl.ClassMap.from_csv(csv)
    assert (cm.num_classes, cm.ignore_index, cm.label_dtype) == (300, 65535, np.uint16)
    mask = np.array([[colours[0], colours[299], (1, 2, 3)]], np.uint8)
    assert cm.map_mask(mask).tolist() == [[0, 299, 65535]]
    assert cm.rgb_tables().num_pairs == 15  # and DALI's tables hold it (test_stages.py)


def test_ignored_pixels_are_drawn_in_a_colour_far_from_every_class():
    """The candidate farthest from the class colours: white beside dark classes, magenta beside black and
    white, and never near Cityscapes' dark blue truck."""
    labels = np.array([[0, 1, 255]])
    assert dl.ClassMap.from_palette([(10, 10, 10), (20, 20, 20)]).colorize(labels)[0, 2].tolist() == [255, 255, 255]
    taken = dl.ClassMap.from_palette([(0, 0, 0), (255, 255, 255)])
    assert taken.ignore_colour().tolist() == [255, 0, 255]
    assert taken.colorize(labels)[0].tolist() == [[0, 0, 0], [255, 255, 255], [255, 0, 255]]
    cityscapes = dl.ClassMap.cityscapes()
    nearest = np.abs(cityscapes.palette().astype(int) - cityscapes.ignore_colour().astype(int)).sum(-1).min()
    assert nearest > 100


@pytest.mark.parametrize("make", [
    lambda: dl.ClassMap.from_palette([[0, 0, 0], [1, 1, 1]], ["a", "a"]),
    lambda: dl.ClassMap.from_ids(2, ["road", "Road"]),
    lambda: dl.ClassMap.from_ids({0: 0, 7: 1, 9: 2}, ["a", "b", "a"]),
    lambda: dl.ClassMap.from_palette_indices([[0, 0, 0], [9, 9, 9], [5, 5, 5]], 2, ["sky", "sky"]),
    lambda: dl.ClassMap(names=("a", "a"), kind="id", id_to_class={0: 0, 1: 1}),
], ids=["from_palette", "from_ids count", "from_ids table", "from_palette_indices", "constructor"])
def test_duplicate_class_names_are_refused_by_every_constructor(make):
    with pytest.raises(DataError, match=r"the class name '\w+' is given to classes \d and \d; give each class its "
                                        "own name"):
        make()


@pytest.mark.parametrize("classes", [
    *map(dl.ClassMap.named, CATALOGUE), dl.synthetic.camvid_classmap(),
    dl.ClassMap.from_ids({0: 0, 255: 1}),  # binary masks, as the loaders' advice for them reads them
    dl.ClassMap.from_ids({255: 0, 0: 1}), dl.ClassMap.from_ids({1: 0, 2: 0, 3: 1}), dl.ClassMap.from_ids(300),
    dl.ClassMap.from_ids({k: k for k in range(256)}, ignore_index=65535),
    dl.ClassMap.from_palette([(0, 0, 0), (255, 255, 255), (255, 0, 255), (0, 255, 255), (255, 255, 0),
                              (128, 128, 128)]),  # every colour ignore_colour() first looks at
], ids=lambda c: c.source if isinstance(c, dl.ClassMap) else None)
def test_to_mask_is_the_inverse_of_map_mask(classes):
    # the ignore index too: written as an id or a colour that no class has (255 is the foreground of the
    # binary map, and a class of {255: 0, 0: 1}; the six-colour palette holds every usual ignore colour)
    labels = np.random.default_rng(5).integers(0, classes.num_classes, (6, 7)).astype(classes.label_dtype)
    labels[0, 0] = classes.ignore_index
    np.testing.assert_array_equal(classes.map_mask(classes.to_mask(labels)), labels)


def test_a_remap_table_of_other_than_integers_is_named_not_truncated():
    for table in ({0: 0, 1: 1.5}, {"a": 0}, {0: True}):
        with pytest.raises(dl.DataError, match="a remap table maps integer mask ids to integer classes"):
            dl.ClassMap.from_ids(table)


def test_classes_that_are_names_or_a_float_are_said_for_what_they_are(synth_data):
    """classes=['road', 'car', ...] raised int()'s ValueError, classes=5.0 a palette's shape: both now a
    DataError that says what classes takes, and for names, where they go."""
    images, masks = (str(Path(synth_data.images[0]).parent), str(Path(synth_data.masks[0]).parent))
    with pytest.raises(dl.DataError, match=r"classes=\['road', 'car', 'sky'\] looks like class names: .*"
                                           r"ClassMap.from_ids\(3, names=\[\.\.\.\]\)"):
        dl.SegmentationData.from_dirs(images, masks, classes=["road", "car", "sky"])
    for given in (5.0, np.float32(3)):
        with pytest.raises(dl.DataError, match=r"classes=.* \(float(32)?\): classes takes a ClassMap, .* a class count "
                                               r"\(an integer\)"):
            dl.SegmentationData.from_dirs(images, masks, classes=given)


def test_a_bool_is_no_ignore_index():
    """ignore_index=True passed the integer test (a bool is an int to Python) and read as 1."""
    with pytest.raises(DataError, match="ignore_index=True with 1 classes"):
        dl.ClassMap.from_ids(1, ignore_index=True)


def test_class_maps_compare_by_value():
    """``train.classes == val.classes``: a dataclass's own == compared the colour arrays element by element
    and raised; now equal maps are equal (and hash alike), and a map that differs in a colour is not."""
    a, b = dl.ClassMap.camvid(), dl.ClassMap.camvid()
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    colours = a.colors.copy()
    colours[3] = (1, 2, 3)
    assert a != dl.ClassMap.from_palette(colours, names=a.names) and a != "camvid"
    assert dl.ClassMap.from_ids(5) == dl.ClassMap.from_ids(5) != dl.ClassMap.from_ids(6)
