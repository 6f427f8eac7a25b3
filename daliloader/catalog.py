"""The class tables of the datasets daliloader recognises, as each one publishes them (names, mask
values, colours for previews). :class:`~daliloader.classes.ClassMap` builds its maps from these.
"""

from __future__ import annotations

import numpy as np

#: Cityscapes, from cityscapesScripts' ``helpers/labels.py``: (name, labelId, trainId, colour). The
#: ``*_gtFine_labelIds.png`` masks hold the labelIds 0-33; the 19 trainIds 0-18 are the classes
#: trained on, and every other labelId is ignored (trainId 255). (The license plate, labelId -1, is
#: never drawn into the masks.)
CITYSCAPES = (
    ("unlabeled", 0, 255, (0, 0, 0)), ("ego vehicle", 1, 255, (0, 0, 0)),
    ("rectification border", 2, 255, (0, 0, 0)), ("out of roi", 3, 255, (0, 0, 0)), ("static", 4, 255, (0, 0, 0)),
    ("dynamic", 5, 255, (111, 74, 0)), ("ground", 6, 255, (81, 0, 81)), ("road", 7, 0, (128, 64, 128)),
    ("sidewalk", 8, 1, (244, 35, 232)), ("parking", 9, 255, (250, 170, 160)), ("rail track", 10, 255, (230, 150, 140)),
    ("building", 11, 2, (70, 70, 70)), ("wall", 12, 3, (102, 102, 156)), ("fence", 13, 4, (190, 153, 153)),
    ("guard rail", 14, 255, (180, 165, 180)), ("bridge", 15, 255, (150, 100, 100)), ("tunnel", 16, 255, (150, 120, 90)),
    ("pole", 17, 5, (153, 153, 153)), ("polegroup", 18, 255, (153, 153, 153)), ("traffic light", 19, 6, (250, 170, 30)),
    ("traffic sign", 20, 7, (220, 220, 0)), ("vegetation", 21, 8, (107, 142, 35)), ("terrain", 22, 9, (152, 251, 152)),
    ("sky", 23, 10, (70, 130, 180)), ("person", 24, 11, (220, 20, 60)), ("rider", 25, 12, (255, 0, 0)),
    ("car", 26, 13, (0, 0, 142)), ("truck", 27, 14, (0, 0, 70)), ("bus", 28, 15, (0, 60, 100)),
    ("caravan", 29, 255, (0, 0, 90)), ("trailer", 30, 255, (0, 0, 110)), ("train", 31, 16, (0, 80, 100)),
    ("motorcycle", 32, 17, (0, 0, 230)), ("bicycle", 33, 18, (119, 11, 32)),
)

#: Pascal VOC 2012 segmentation: the 21 classes, by mask palette index; index 255 marks object borders
#: and "difficult" regions, which are ignored.
VOC_CLASSES = ("background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
               "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
               "tvmonitor")
VOC_IGNORE = 255


def voc_colormap(n: int = 256) -> np.ndarray:
    """The palette of VOC's masks (the devkit's ``VOClabelcolormap``): the bits of index ``i`` spread
    over the high bits of r, g and b in turn; every index gets a distinct colour."""
    cmap = np.zeros((n, 3), np.uint8)
    for i in range(n):
        c, rgb = i, [0, 0, 0]
        for shift in range(7, -1, -1):
            for channel in range(3):
                rgb[channel] |= ((c >> channel) & 1) << shift
            c >>= 3
        cmap[i] = rgb
    return cmap


#: ADE20K as the MIT Scene Parsing benchmark ships it (``ADEChallengeData2016``): the 150 classes of
#: ``objectInfo150.csv``, stored in the 8-bit masks as 1-150; 0 is "other objects", which is ignored.
#: The usual training convention (mmsegmentation's ``reduce_zero_label``): class = mask value - 1.
ADE20K_CLASSES = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane", "grass", "cabinet", "sidewalk",
    "person", "earth", "door", "table", "mountain", "plant", "curtain", "chair", "car", "water", "painting", "sofa",
    "shelf", "house", "sea", "mirror", "rug", "field", "armchair", "seat", "fence", "desk", "rock", "wardrobe",
    "lamp", "bathtub", "railing", "cushion", "base", "box", "column", "signboard", "chest of drawers", "counter",
    "sand", "sink", "skyscraper", "fireplace", "refrigerator", "grandstand", "path", "stairs", "runway", "case",
    "pool table", "pillow", "screen door", "stairway", "river", "bridge", "bookcase", "blind", "coffee table",
    "toilet", "flower", "book", "hill", "bench", "countertop", "stove", "palm", "kitchen island", "computer",
    "swivel chair", "boat", "bar", "arcade machine", "hovel", "bus", "towel", "light", "truck", "tower",
    "chandelier", "awning", "streetlight", "booth", "television receiver", "airplane", "dirt track", "apparel",
    "pole", "land", "bannister", "escalator", "ottoman", "bottle", "buffet", "poster", "stage", "van", "ship",
    "fountain", "conveyer belt", "canopy", "washer", "plaything", "swimming pool", "stool", "barrel", "basket",
    "waterfall", "tent", "bag", "minibike", "cradle", "oven", "ball", "food", "step", "tank", "trade name",
    "microwave", "pot", "animal", "bicycle", "lake", "dishwasher", "screen", "blanket", "sculpture", "hood",
    "sconce", "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen", "plate", "monitor",
    "bulletin board", "shower", "radiator", "glass", "clock", "flag",
)

#: ADE20K's 100 instance categories, as MIT's Places Challenge 2017 instance segmentation release
#: (``annotations_instance``, which TFDS's ``scene_parse150`` reads) stores them: the red channel of its
#: colour masks holds the category, 1-100 in the order of ``instanceInfo100_train.txt`` (0: no instance,
#: which covers the "stuff" classes such as wall, floor and sky), the green channel the instance. They
#: are the object classes of the 150 above, numbered anew (CSAILVision/placeschallenge).
ADE20K_INSTANCE_CLASSES = (
    "bed", "windowpane", "cabinet", "person", "door", "table", "curtain", "chair", "car", "painting", "sofa",
    "shelf", "mirror", "armchair", "seat", "fence", "desk", "wardrobe", "lamp", "bathtub", "railing", "cushion",
    "box", "column", "signboard", "chest of drawers", "counter", "sink", "fireplace", "refrigerator", "stairs",
    "case", "pool table", "pillow", "screen door", "bookcase", "coffee table", "toilet", "flower", "book", "bench",
    "countertop", "stove", "palm", "kitchen island", "computer", "swivel chair", "boat", "arcade machine", "bus",
    "towel", "light", "truck", "chandelier", "awning", "streetlight", "booth", "television receiver", "airplane",
    "apparel", "pole", "bannister", "ottoman", "bottle", "van", "ship", "fountain", "washer", "plaything", "stool",
    "barrel", "basket", "bag", "minibike", "oven", "ball", "food", "step", "trade name", "microwave", "pot",
    "animal", "bicycle", "dishwasher", "screen", "sculpture", "hood", "sconce", "vase", "traffic light", "tray",
    "ashcan", "fan", "plate", "monitor", "bulletin board", "radiator", "glass", "clock", "flag",
)

#: CamVid's 32 classes and colours, as in the class_dict.csv of its common
#: distribution (the 701 labelled frames with ``train``/``val``/``test`` and ``*_labels`` folders).
CAMVID_CLASSES = (
    ("Animal", 64, 128, 64), ("Archway", 192, 0, 128), ("Bicyclist", 0, 128, 192),
    ("Bridge", 0, 128, 64), ("Building", 128, 0, 0), ("Car", 64, 0, 128),
    ("CartLuggagePram", 64, 0, 192), ("Child", 192, 128, 64), ("Column_Pole", 192, 192, 128),
    ("Fence", 64, 64, 128), ("LaneMkgsDriv", 128, 0, 192), ("LaneMkgsNonDriv", 192, 0, 64),
    ("Misc_Text", 128, 128, 64), ("MotorcycleScooter", 192, 0, 192), ("OtherMoving", 128, 64, 64),
    ("ParkingBlock", 64, 192, 128), ("Pedestrian", 64, 64, 0), ("Road", 128, 64, 128),
    ("RoadShoulder", 128, 128, 192), ("Sidewalk", 0, 0, 192), ("SignSymbol", 192, 128, 128),
    ("Sky", 128, 128, 128), ("SUVPickupTruck", 64, 128, 192), ("TrafficCone", 0, 0, 64),
    ("TrafficLight", 0, 64, 64), ("Train", 192, 64, 128), ("Tree", 128, 128, 0),
    ("Truck_Bus", 192, 128, 192), ("Tunnel", 64, 0, 64), ("VegetationMisc", 192, 192, 0),
    ("Void", 0, 0, 0), ("Wall", 64, 192, 0),
)

#: The Oxford-IIIT Pet trimaps (TFDS's ``oxford_iiit_pet``, ``segmentation_mask``): 1 the pet, 2 the
#: background, 3 the border between them, not classified. As TensorFlow's segmentation tutorial reads
#: them: class = mask value - 1, three classes.
OXFORD_PETS_CLASSES = ("pet", "background", "border")
