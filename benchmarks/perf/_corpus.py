"""Synthetic but realistic memories, queries and a fast deterministic embedder for perf runs.

The memories are short mixed Chinese/English sentences generated from templates, in the style of
L1 memories (persona facts, episodic events, standing instructions). The embedder is a
bag-of-tokens random projection: texts that share words get similar vectors, and every vector
carries a shared component so that unrelated texts still have a cosine of about 0.6-0.8, which is
what real sentence embedders (e5, USE) produce. It embeds about 100k texts in a few seconds, so a
100k-memory store can be built in a benchmark run; it is not meant to be semantically good.
"""

from __future__ import annotations

import itertools
import random
import re
import zlib
from collections.abc import Sequence
from typing import Final

import numpy as np
from langchain_core.embeddings import Embeddings

__all__ = ["HashingEmbeddings", "make_memories", "make_queries"]


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _phrases(text: str) -> tuple[str, ...]:
    return tuple(text.split("|"))


_NAMES_EN: Final = _words(
    "Alice Bob Carol David Emma Frank Grace Henry Irene Jack Kate Leo Mia Noah "
    "Olivia Paul Quinn Rosa Sam Tina Uma Victor Wendy Xavier Yara Zane"
)
_NAMES_ZH: Final = _words(
    "小王 小李 张伟 王芳 李娜 刘洋 陈静 杨帆 赵磊 黄敏 "
    "周杰 吴婷 徐明 孙悦 马超 朱琳 胡军 郭蕊 林涛 何雪"
)
_PLACES_EN: Final = _words(
    "Paris Tokyo Berlin Lisbon Seattle Boston Denver Kyoto Oslo Prague Vienna Dublin "
    "Austin Toronto Sydney Madrid Rome Seoul Chicago Barcelona"
)
_PLACES_ZH: Final = _words(
    "杭州 上海 北京 成都 深圳 广州 西安 南京 苏州 厦门 "
    "青岛 大理 重庆 武汉 长沙 昆明 三亚 哈尔滨 桂林 拉萨"
)
_FOODS_EN: Final = _words(
    "sushi ramen pizza tacos pho curry dumplings salad oatmeal pancakes steak tofu "
    "noodles bagels croissants hotpot"
)
_FOODS_ZH: Final = _words(
    "火锅 小龙虾 烤鸭 饺子 拉面 寿司 披萨 沙拉 燕麦 包子 米粉 烧烤 酸菜鱼 麻辣烫 煎饼 粥"
)
_HOBBIES_EN: Final = _words(
    "running hiking swimming chess painting guitar piano cycling yoga photography "
    "climbing gardening baking knitting surfing tennis"
)
_HOBBIES_ZH: Final = _words(
    "跑步 爬山 游泳 下棋 画画 吉他 钢琴 骑行 瑜伽 摄影 攀岩 园艺 烘焙 钓鱼 羽毛球 书法"
)
_THINGS_EN: Final = _phrases(
    "the quarterly report|the database migration|the team offsite|the product launch|"
    "the marathon|the dentist appointment|the visa application|the wedding|"
    "the job interview|the code review|the apartment lease|the flight booking|"
    "the budget review|the research paper"
)
_THINGS_ZH: Final = _words(
    "季度报告 数据库迁移 团队团建 产品发布 马拉松 牙医预约 签证申请 "
    "婚礼 面试 代码评审 租房合同 机票预订 预算评审 论文投稿"
)
_LANGS: Final = _words("Python Go Rust TypeScript Java Kotlin Swift SQL")
_PETS_EN: Final = _words("cat dog parrot rabbit hamster turtle")
_PETS_ZH: Final = _words("猫 狗 鹦鹉 兔子 仓鼠 乌龟")

_TEMPLATES: Final[tuple[tuple[str, str, str], ...]] = (
    ("persona", "个人信息", "The user is called {name_en} and lives in {place_en}."),
    ("persona", "饮食", "The user loves {food_en} but avoids {food_en2} for health reasons."),
    ("persona", "爱好", "The user goes {hobby_en} every {weekday} morning with {name_en}."),
    ("persona", "工作", "The user writes {lang} at work and is learning {lang2} on weekends."),
    ("persona", "家庭", "The user has a {pet_en} named {name_en2} who is {num} years old."),
    ("episodic", "出行", "The user flew to {place_en} on {date} for {thing_en}."),
    ("episodic", "工作", "On {date} the user finished {thing_en} with {name_en}."),
    ("episodic", "健康", "The user ran {num} km in {place_en} on {date} and felt great."),
    ("episodic", "社交", "The user had {food_en} with {name_en} in {place_en} on {date}."),
    ("instruction", "", "Always answer the user in English and keep replies under {num} lines."),
    ("instruction", "", "Remind the user about {thing_en} {num} days in advance."),
    ("persona", "个人信息", "用户叫{name_zh}，今年{num2}岁，老家在{place_zh}。"),
    ("persona", "饮食", "用户很喜欢吃{food_zh}，但是不吃{food_zh2}。"),
    ("persona", "爱好", "用户每周{weekday_zh}都会去{hobby_zh}，已经坚持了{num}年。"),
    ("persona", "工作", "用户主力语言是{lang}，最近在学{lang2}。"),
    ("persona", "家庭", "用户养了一只{pet_zh}，叫{name_zh2}，{num}岁了。"),
    ("episodic", "出行", "用户{date_zh}去了{place_zh}，主要是为了{thing_zh}。"),
    ("episodic", "工作", "用户{date_zh}和{name_zh}一起完成了{thing_zh}。"),
    ("episodic", "健康", "用户{date_zh}在{place_zh}跑了{num}公里，感觉状态不错。"),
    ("episodic", "社交", "用户{date_zh}和{name_zh}在{place_zh}吃了{food_zh}。"),
    ("instruction", "", "回答用户时请用中文，并且不要超过{num}行。"),
    ("instruction", "", "提前{num}天提醒用户{thing_zh}的事情。"),
    ("episodic", "工作", "用户说 {thing_en} 的 deadline 是{date_zh}，需要和{name_en}对齐。"),
    ("persona", "爱好", "用户 likes {hobby_en} and {hobby_zh}, usually in {place_zh}."),
)
_QUERY_TEMPLATES: Final = (
    "What does the user like to eat?",
    "When did I go to {place_en}?",
    "Who did I have {food_en} with?",
    "What language do I use at work?",
    "How far did I run in {place_en}?",
    "What is my {pet_en}'s name?",
    "我上次去{place_zh}是什么时候？",
    "我喜欢吃什么？",
    "我和{name_zh}一起做了什么？",
    "{thing_zh}的截止日期是哪天？",
    "我平时有什么爱好？",
    "我的{pet_zh}叫什么名字？",
    "remind me about {thing_en}",
    "{hobby_zh}",
    "{place_en} trip",
)
_WEEKDAYS: Final = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
)
_WEEKDAYS_ZH: Final = (
    "一",
    "二",
    "三",
    "四",
    "五",
    "六",
    "日",
)


def _slots(rng: random.Random) -> dict[str, str]:
    year = rng.choice((2022, 2023, 2024, 2025))
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    return {
        "name_en": rng.choice(_NAMES_EN),
        "name_en2": rng.choice(_NAMES_EN),
        "name_zh": rng.choice(_NAMES_ZH),
        "name_zh2": rng.choice(_NAMES_ZH),
        "place_en": rng.choice(_PLACES_EN),
        "place_zh": rng.choice(_PLACES_ZH),
        "food_en": rng.choice(_FOODS_EN),
        "food_en2": rng.choice(_FOODS_EN),
        "food_zh": rng.choice(_FOODS_ZH),
        "food_zh2": rng.choice(_FOODS_ZH),
        "hobby_en": rng.choice(_HOBBIES_EN),
        "hobby_zh": rng.choice(_HOBBIES_ZH),
        "thing_en": rng.choice(_THINGS_EN),
        "thing_zh": rng.choice(_THINGS_ZH),
        "lang": rng.choice(_LANGS),
        "lang2": rng.choice(_LANGS),
        "pet_en": rng.choice(_PETS_EN),
        "pet_zh": rng.choice(_PETS_ZH),
        "weekday": rng.choice(_WEEKDAYS),
        "weekday_zh": "周" + rng.choice(_WEEKDAYS_ZH),
        "num": str(rng.randint(2, 42)),
        "num2": str(rng.randint(18, 70)),
        "date": f"{year}-{month:02d}-{day:02d}",
        "date_zh": f"{year}年{month}月{day}日",
    }


def make_memories(n: int, *, seed: int = 0) -> list[dict[str, object]]:
    """Generate `n` memory records as dicts accepted by `TdaiMemory.add_memories`.

    Args:
        n: Number of records.
        seed: Seed of the generator; the same seed yields the same records.

    Returns:
        Records with `content`, `type`, `scene_name` and `priority`.
    """
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for _ in range(n):
        mtype, scene, template = rng.choice(_TEMPLATES)
        out.append(
            {
                "content": template.format(**_slots(rng)),
                "type": mtype,
                "scene_name": scene,
                "priority": rng.randint(10, 90),
            }
        )
    return out


def make_queries(n: int, *, seed: int = 1) -> list[str]:
    """Generate `n` user turns (questions and short keyword queries) in Chinese and English.

    Args:
        n: Number of queries.
        seed: Seed of the generator.

    Returns:
        The query texts.
    """
    rng = random.Random(seed)
    return [rng.choice(_QUERY_TEMPLATES).format(**_slots(rng)) for _ in range(n)]


_TOKEN_RE: Final = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]")
_TABLE_ROWS: Final = 1 << 14


class HashingEmbeddings(Embeddings):
    """Deterministic bag-of-tokens embedder (Latin words, CJK characters and CJK bigrams).

    Each token selects a row of a fixed Gaussian table by CRC32; a text's vector is a shared
    component plus the mean of its token rows, L2-normalised. Not semantic; fast and stable
    across runs and machines.

    Args:
        dim: Output dimension.
        shared: Weight of the component shared by all texts (sets the typical cosine between
            unrelated texts).
        seed: Seed of the token table.
    """

    def __init__(self, dim: int = 384, *, shared: float = 0.9, seed: int = 7) -> None:
        self.dim = dim
        rng = np.random.default_rng(seed)
        table = rng.standard_normal((_TABLE_ROWS, dim), dtype=np.float32)
        self._table = table / np.linalg.norm(table, axis=1, keepdims=True)
        common = rng.standard_normal(dim).astype(np.float32)
        self._common = shared * common / np.linalg.norm(common)

    def _token_rows(self, text: str) -> list[int]:
        lowered = text.lower()
        toks = _TOKEN_RE.findall(lowered)
        grams = [a + b for a, b in itertools.pairwise(toks) if len(a) == len(b) == 1]
        return [zlib.crc32(t.encode("utf-8")) % _TABLE_ROWS for t in toks + grams] or [0]

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts into a float32 array of shape (len(texts), dim).

        Args:
            texts: Texts to embed.

        Returns:
            L2-normalised vectors.
        """
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        table = self._table
        for i, text in enumerate(texts):
            rows = self._token_rows(text)
            out[i] = table[rows].sum(axis=0) / np.sqrt(len(rows))
        out += self._common
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents.

        Args:
            texts: Texts to embed.

        Returns:
            One vector per text.
        """
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        """Embed a query.

        Args:
            text: Query text.

        Returns:
            The vector.
        """
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]
