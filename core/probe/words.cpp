// The probes' word lists (keys "adjective-noun" as RULER's wonderwords pairs, the common-words task's pool): plain
// English words, fixed here so that a suite's text is the same on every machine.
#include "probe/detail.h"

namespace kvscope::probe::detail {

const std::vector<std::string_view>& nouns() {
  static const std::vector<std::string_view> w = {
      "apple",      "arrow",     "anchor",    "attic",     "badge",    "bakery",  "balloon",  "banana",   "banner",
      "barrel",     "basket",    "beach",     "beacon",    "bean",     "bear",    "beetle",   "bell",     "bench",
      "berry",      "bicycle",   "blanket",   "boat",      "bonnet",   "book",    "bottle",   "boulder",  "bowl",
      "bracelet",   "branch",    "bread",     "bridge",    "broom",    "bucket",  "bundle",   "butter",   "button",
      "cabin",      "cable",     "cactus",    "camera",    "camel",    "candle",  "canoe",    "canyon",   "carpet",
      "carrot",     "castle",    "cellar",    "chair",     "chalk",    "cherry",  "chimney",  "circle",   "cliff",
      "clock",      "cloud",     "coast",     "coconut",   "collar",   "comet",   "compass",  "cookie",   "copper",
      "cottage",    "cotton",    "crayon",    "creek",     "crown",    "crystal", "cup",      "curtain",  "cushion",
      "daisy",      "desert",    "desk",      "diamond",   "dolphin",  "donkey",  "door",     "dragon",   "drawer",
      "drum",       "eagle",     "engine",    "envelope",  "falcon",   "feather", "fence",    "fern",     "fiddle",
      "field",      "flag",      "flame",     "flute",     "forest",   "fork",    "fountain", "fox",      "frog",
      "garden",     "garlic",    "gate",      "giraffe",   "glacier",  "glove",   "goat",     "goose",    "grape",
      "guitar",     "hammer",    "harbor",    "harp",      "hat",      "hedge",   "helmet",   "hill",     "honey",
      "horse",      "island",    "jacket",    "jar",       "jelly",    "jewel",   "kettle",   "key",      "kite",
      "kitten",     "ladder",    "lake",      "lamp",      "lantern",  "leaf",    "lemon",    "lettuce",  "library",
      "lighthouse", "lily",      "lion",      "lizard",    "lobster",  "locket",  "magnet",   "mango",    "map",
      "maple",      "marble",    "meadow",    "melon",     "mirror",   "mitten",  "monkey",   "moon",     "mountain",
      "mouse",      "mushroom",  "needle",    "nest",      "notebook", "oak",     "ocean",    "olive",    "onion",
      "orange",     "orchard",   "otter",     "owl",       "paddle",   "paint",   "palace",   "panda",    "paper",
      "parrot",     "peach",     "peanut",    "pear",      "pebble",   "pencil",  "penguin",  "pepper",   "piano",
      "pillow",     "pine",      "pipe",      "planet",    "plum",     "pocket",  "pond",     "potato",   "pumpkin",
      "puzzle",     "quilt",     "rabbit",    "radish",    "raft",     "rainbow", "raven",    "ribbon",   "river",
      "robin",      "rocket",    "rope",      "rose",      "saddle",   "sail",    "salmon",   "sandal",   "scarf",
      "scissors",   "shell",     "shelf",     "shovel",    "silver",   "sled",    "snail",    "sock",     "spider",
      "spoon",      "squirrel",  "stable",    "star",      "statue",   "stone",   "storm",    "stream",   "sugar",
      "sunflower",  "swan",      "sweater",   "table",     "teapot",   "tent",    "thimble",  "thunder",  "tiger",
      "timber",     "tomato",    "torch",     "tower",     "tractor",  "trumpet", "tulip",    "tunnel",   "turtle",
      "umbrella",   "valley",    "vase",      "velvet",    "village",  "violin",  "volcano",  "wagon",    "walnut",
      "wallet",     "walrus",    "wand",      "whale",     "wheel",    "whistle", "willow",   "window",   "wolf",
      "wool",       "yacht",     "zebra",     "acorn",     "album",    "alley",   "almond",   "altar",    "amber",
      "ankle",      "antler",    "apron",     "arch",      "armor",    "avenue",  "bagel",    "ballad",   "bamboo",
      "bandit",     "barn",      "basin",     "beard",     "biscuit",  "blossom", "bonfire",  "boot",     "bouquet",
      "brick",      "bubble",    "buffalo",   "bugle",     "cabbage",  "canal",   "canvas",   "captain",  "caravan",
      "cargo",      "cathedral", "cave",      "cedar",     "chapel",   "chariot", "cheese",   "chestnut", "cinnamon",
      "clover",     "cobra",     "coffee",    "coral",     "corn",     "cradle",  "crane",    "cricket",  "crow",
      "cucumber",   "dagger",    "dawn",      "deer",      "dune",     "dust",    "elbow",    "elephant", "elm",
      "ember",      "emerald",   "fabric",    "fig",       "flannel",  "fleet",   "flower",   "fog",      "fossil",
      "frost",      "galaxy",    "gazelle",   "ginger",    "glass",    "globe",   "granite",  "gravel",   "griffin",
      "gull",       "hamlet",    "harvest",   "hawk",      "hazel",    "heron",   "hive",     "holly",    "hornet",
      "iceberg",    "igloo",     "ink",       "ivory",     "ivy",      "jaguar",  "jasmine",  "juniper",  "kayak",
      "kernel",     "koala",     "lagoon",    "lavender",  "lemonade", "lens",    "lime",     "linen",    "llama",
      "lotus",      "lynx",      "mammoth",   "mantle",    "marsh",    "meteor",  "mint",     "moss",     "moth",
      "mule",       "nectar",    "nutmeg",    "oasis",     "oatmeal",  "orbit",   "orchid",   "ostrich",  "oyster",
      "pagoda",     "parsley",   "pasta",     "pastry",    "pavilion", "pearl",   "pelican",  "petal",    "pheasant",
      "pickle",     "pigeon",    "pilgrim",   "pistachio", "plateau",  "pony",    "poppy",    "porch",    "prairie",
      "quartz",     "quill",     "raccoon",   "raisin",    "reef",     "rhubarb", "ridge",    "saffron",  "sapphire",
      "scroll",     "seal",      "sequoia",   "shadow",    "shark",    "sheep",   "shrimp",   "silk",     "slipper",
      "sparrow",    "spinach",   "sponge",    "spruce",    "stallion", "summit",  "swamp",    "syrup",    "tambourine",
      "tangerine",  "thistle",   "thyme",     "toad",      "topaz",    "trout",   "truffle",  "tundra",   "vanilla",
      "violet",     "wasp",      "waterfall", "weasel",    "wheat",    "wren",    "yarn",     "yogurt"};
  return w;
}

const std::vector<std::string_view>& adjectives() {
  static const std::vector<std::string_view> w = {
      "able",    "absent",  "agile",  "amber",   "ancient", "angry",   "anxious",  "arctic",  "awake",   "bald",
      "bitter",  "black",   "bland",  "blue",    "bold",    "brave",   "breezy",   "brief",   "bright",  "brisk",
      "broad",   "broken",  "busy",   "calm",    "careful", "cheap",   "cheerful", "chilly",  "clean",   "clever",
      "cloudy",  "clumsy",  "coarse", "cold",    "cozy",    "crisp",   "crooked",  "cruel",   "curious", "curly",
      "damp",    "dark",    "deep",   "dense",   "dizzy",   "dry",     "dusty",    "eager",   "early",   "easy",
      "elegant", "empty",   "faint",  "fair",    "famous",  "fancy",   "fast",     "fierce",  "filthy",  "firm",
      "flat",    "fluffy",  "fond",   "fragile", "free",    "fresh",   "friendly", "frozen",  "fuzzy",   "gentle",
      "giant",   "gloomy",  "glossy", "golden",  "grand",   "gray",    "greasy",   "great",   "green",   "grumpy",
      "happy",   "hardy",   "harsh",  "heavy",   "hidden",  "hollow",  "honest",   "humble",  "hungry",  "icy",
      "idle",    "jolly",   "juicy",  "keen",    "kind",    "large",   "late",     "lazy",    "lean",    "light",
      "little",  "lively",  "lonely", "long",    "loud",    "lucky",   "mellow",   "merry",   "mighty",  "mild",
      "misty",   "modern",  "moist",  "muddy",   "narrow",  "neat",    "nervous",  "new",     "nimble",  "noble",
      "noisy",   "odd",     "old",    "orange",  "pale",    "patient", "plain",    "plump",   "polite",  "proud",
      "purple",  "quick",   "quiet",  "rapid",   "rare",    "raw",     "red",      "rich",    "rigid",   "ripe",
      "rough",   "round",   "royal",  "rusty",   "sad",     "salty",   "sandy",    "scarlet", "shallow", "sharp",
      "shiny",   "short",   "shy",    "silent",  "silly",   "simple",  "sleepy",   "slim",    "slow",    "small",
      "smooth",  "snowy",   "soft",   "solid",   "sour",    "spicy",   "steady",   "steep",   "sticky",  "stiff",
      "stormy",  "strange", "strict", "strong",  "sturdy",  "sunny",   "sweet",    "swift",   "tall",    "tame",
      "tart",    "tender",  "thick",  "thin",    "thirsty", "tidy",    "tiny",     "tired",   "tough",   "tranquil",
      "vast",    "velvety", "vivid",  "warm",    "wary",    "weak",    "wealthy",  "weary",   "wet",     "white",
      "wide",    "wild",    "windy",  "wise",    "witty",   "wooden",  "yellow",   "young",   "zealous"};
  return w;
}

}  // namespace kvscope::probe::detail
