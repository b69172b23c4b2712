"""The many-shapes world in Chinese (bench/shapes_world.py's ``Wording`` for ``language="zh"``).

Every table has as many templates per key as the English one, so that one seed draws the same
facts in both languages (the builder's random choices do not depend on the wording): the Chinese
numbers compare with the English ones like for like.

Names are transliterations without spaces, as Chinese writes foreign names (bench/multihop_zh.py's
way, with other characters, for the shapes world's other syllables): one character per syllable,
a two-syllable word closed by a filler, so that every word is three characters; a person's two
words joined by "·"; a company's word followed by a Chinese descriptor and legal form (兄弟集团,
实业有限公司, 合作社, ...); a product's word followed by its kind (收割机, 拖网渔船). The name
characters appear in no template, prose or question, so a name is found in a text exactly where
the world put it. A company's short form is what Chinese writes: the word's first character and
the descriptor's (贝温尔兄弟集团 -> 贝兄), introduced in brackets ("（简称贝兄）", "（贝兄）",
"（以下简称“贝兄”）"); a quarter of the aliased companies get the English acronym instead
("贝温尔兄弟集团（BVB）"), as foreign firms often are.

Numbers: headcounts with a thousands comma, as annual reports write them ("员工4,270人"); revenues
in 亿 / 万 euros ("4.125亿欧元" for 412.5 million, "5320万欧元" for 53.2 million); dates as
"2019年3月5日".
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from decimal import Decimal

import opencc

from bench.shapes_world import SYLLABLES, Wording

# one character per syllable (SYLLABLES' order), used by no template, prose or question
SYLLABLE_CHARACTERS = dict(zip(SYLLABLES, "贝朵阿温柯梅蒂冉戈埃瓦宁璞索泰哈奥耶卡隆蓓珐吉伊珍寇涅沃菈苏詹韦",
                               strict=True))
FILLERS = "尔姆恩兹"   # the third character of a two-syllable word
PERSON_JOIN = "·"
# bench/shapes_world.COMPANY_SUFFIXES -> a descriptor and legal form; the descriptors' first characters
# begin no product kind and follow no name in any template (a short form is found only where it stands)
COMPANY_ZH = {"Brothers": "兄弟集团", "Consolidated": "联合控股", "Associates": "协力股份有限公司",
              "Partners": "伙伴有限公司", "Enterprises": "实业有限公司", "Concern": "重工集团",
              "Trading": "贸易公司", "Cooperative": "合作社"}
LEGAL_FORMS = ("股份有限公司", "有限公司", "公司", "集团", "控股", "合作社")   # longest first
PRODUCT_ZH = {"Skiff": "小艇", "Trawler": "拖网渔船", "Tug": "拖轮", "Barge": "驳船", "Harvester": "收割机",
              "Seeder": "播种机", "Baler": "打捆机", "Plough": "犁", "Loom": "织布机", "Spinner": "纺纱机",
              "Knitter": "针织机", "Drill": "钻机", "Crusher": "破碎机", "Hoist": "提升机", "Glider": "滑翔机",
              "Turboprop": "涡桨飞机", "Rotor": "旋翼机", "Tablet": "片剂", "Serum": "血清", "Syrup": "糖浆",
              "Railcar": "轨道车", "Locomotive": "机车", "Bogie": "转向架", "Oven": "烤炉", "Mixer": "搅拌机",
              "Slicer": "切片机", "Turbine": "涡轮机", "Boiler": "锅炉", "Heat Pump": "热泵", "Press": "印刷机",
              "Binder": "装订机", "Folder": "折页机"}
LATIN_SHARE = 4   # one aliased company in LATIN_SHARE is introduced by its English acronym


def transliterate(word: str, syllables: dict[str, tuple[str, ...]]) -> str:
    """A word of the world as three Chinese characters."""
    parts = syllables[word]
    text = "".join(SYLLABLE_CHARACTERS[s] for s in parts)
    if len(parts) == 2:
        text += FILLERS[zlib.crc32(word.encode()) % len(FILLERS)]
    return text


@functools.cache
def _traditional() -> opencc.OpenCC:
    return opencc.OpenCC("s2t")


def legal_form(name: str) -> str:
    return next((form for form in LEGAL_FORMS if name.endswith(form) and len(name) > len(form) + 2), "")


def variants(name: str, kind: str) -> list[str]:
    """How a model extracting Chinese text may write a name of the world: in traditional characters,
    a company without its legal form or with 有限公司 added (股份有限公司 for one that has 有限公司),
    a person with another dot (•, ・) or none, a city with 市, a product in quotation marks."""
    traditional = _traditional().convert(name)
    written = [traditional] if traditional != name else []
    if kind == "Organization":
        form = legal_form(name)
        if form:
            written.append(name[: -len(form)])
        written.append(name.replace("有限公司", "股份有限公司") if form == "有限公司" else
                       name + "有限公司" if not name.endswith("公司") else name + "（集团）")
    elif kind == "Person":
        written += [name.replace(PERSON_JOIN, mark) for mark in ("•", "・", "")]
    elif kind == "Location":
        written.append(name + "市")
    elif kind == "Artifact":
        written.append(f"“{name}”")
    return written


@dataclass(frozen=True)
class ChineseWording(Wording):
    def date(self, iso: str) -> str:
        year, month, day = (int(part) for part in iso.split("-"))
        return f"{year}年{month}月{day}日"

    def money(self, millions: str) -> str:
        """Millions of euros as Chinese writes them: in 亿 (100 million) from 100 million, else in 万."""
        value = Decimal(millions)
        if value >= 100:
            return f"{(value / 100).normalize():f}亿"
        return f"{(value * 100).normalize():f}万"

    def name(self, english: str, kind: str, syllables: dict[str, tuple[str, ...]]) -> str:
        word, _, rest = english.partition(" ")
        if kind == "Person":
            return PERSON_JOIN.join(transliterate(w, syllables) for w in english.split(" "))
        if kind == "Organization":
            return transliterate(word, syllables) + COMPANY_ZH[rest]
        if kind == "Artifact":
            return transliterate(word, syllables) + PRODUCT_ZH[rest]
        return transliterate(english, syllables)

    def short_forms(self, name: str, english: str, acronym: str) -> list[str]:
        """The word's first character and the descriptor's (a longer one if that is taken), or for one
        company in LATIN_SHARE its English acronym."""
        if zlib.crc32(english.encode()) % LATIN_SHARE == 0:
            return [acronym]
        word, descriptor = name[:3], name[3:]
        return [word[0] + descriptor[0], word[0] + descriptor[:2], word[:2] + descriptor[0], acronym]


ZH = ChineseWording(
    language="zh",
    joiner="",
    statements={
        "dateline": ("{date}讯。", "发布日期：{date}。", "{date}行业简讯。", "本刊{date}消息。"),
        "sector": ("{c}活跃在{sector}领域。", "{c}是本地区的{sector}企业之一。",
                   "作为一家{sector}企业，{c}依赖稳定的订单。"),
        "founder": ("{c}由{p}于{year}年创立。", "{p}于{year}年创办了{c}。",
                    "{c}的历史可以追溯到{year}年，当时{p}开设了第一家作坊。"),
        "founder-sector": ("{c}是一家由{p}于{year}年创立的{sector}企业，今年业绩亮眼。",
                           "{p}于{year}年创办的{c}已成长为一家中型{sector}企业。"),
        "hq": ("{c}的总部位于{city}。", "{c}的总办事处设在{city}。", "{c}把总部设在{city}，紧邻老城区。",
               "{c}从位于{city}的总部为全国客户提供服务。"),
        "chair": ("{p}担任{c}董事会主席。", "{c}的董事会由{p}担任主席。", "{c}董事会主席{p}主持了年度股东大会。"),
        "makes": ("{c}生产{prod}。", "{prod}出自{c}的车间。", "{c}把{prod}列入了产品目录。",
                  "客户对{c}出品的{prod}赞誉有加。"),
        "fair-makes": ("{c}在{city}的贸易展览会上展示了{prod}。", "在{city}举行的贸易展上，{c}推出了{prod}。"),
        "fair": ("{c}参加了在{city}举办的贸易展览会。", "{c}在{city}的博览会上租下了一个大展位。"),
        "plant": ("{c}在{city}经营一家工厂。", "{c}在{city}开设了一家工厂。", "{c}位于{city}的新工厂已经投产。"),
        "employs": ("{p}在{c}担任工程师。", "{p}加入{c}，出任采购员。", "{p}负责管理{c}的仓库。"),
        "partner": ("{c}与{o}签署了合作协议。", "{c}与{o}携手开展一个联合项目。"),
        "supplies": ("{c}向{o}供应零部件。", "{o}从{c}采购零件。", "{c}是{o}的长期供应商。"),
        "lender": ("{c}为{o}提供授信额度。", "{o}的主要账户开在{c}。", "{c}是{o}的主要贷款方。"),
        "auditor": ("{c}负责审计{o}的年度报表。", "{o}聘请{c}担任审计机构。"),
        "acquired": ("{a}于{year}年收购了{t}。", "{a}完成了对{t}的收购。", "{t}于{year}年并入{a}。",
                     "{t}的股东批准了{a}提出的收购要约。"),
        "ceo": ("{p}是{c}的首席执行官。", "{c}由首席执行官{p}领导。", "{p}自{year}年起担任{c}首席执行官。"),
        "ceo-past": ("{p}在{y1}年至{y2}年间担任{c}首席执行官。", "{y1}年到{y2}年，{p}以首席执行官身份领导{c}。"),
        "succession": ("{year}年，{new}接替{old}出任{c}首席执行官。",
                       "{new}于{year}年接替{old}，成为{c}的首席执行官。"),
        "headcount": ("{c}拥有员工{n}人。", "{c}员工总数达{n}人，位居本区最大雇主之列。",
                      "截至年底，{c}报告的员工人数为{n}人。"),
        "revenue": ("{c}公布的年营业收入为{r}欧元。", "{c}的销售额达到{r}欧元。", "{c}全年营收{r}欧元。"),
        "headcount-revenue": ("{c}拥有员工{n}人，营业额{r}欧元。", "{c}凭借{n}名员工实现营收{r}欧元。"),
        "headcount-now": ("{c}目前拥有员工{n}人。", "根据最新披露，{c}现有员工{n}人。"),
        "revenue-now": ("{c}目前的年营业收入为{r}欧元。", "{c}的营收现已达到{r}欧元。"),
        "alias-plant": ("{f}（简称{k}）在{city}开设了一家工厂。", "{f}（以下简称“{k}”）位于{city}的新工厂正式投产。"),
        "alias-partner": ("{f}（{k}）与{o}签署了合作协议。", "{f}（以下简称“{k}”）与{o}携手开展一个联合项目。"),
        "column": ("{p}在报纸专栏中称赞了{c}。", "{p}撰文指出，{c}值得更多关注。",
                   "{p}在接受采访时以{c}为例谈论本地区的发展。"),
    },
    prose=(
        "夏季沿海航线的运费上涨了百分之{n}。",
        "今年春天，商会新增了{n}家会员企业。",
        "能源价格挤压了制造业的利润。",
        "多家作坊反映熟练焊工短缺。",
        "劳资双方先后会谈{n}次，才就工资协议达成一致。",
        "边境清关延误使交货时间增加了{n}天。",
        "出口商欢迎本币走软，尽管进口成本随之攀升。",
        "主管部门把学徒补贴计划延长了{n}个月。",
        "一些地区的仓储保险费翻了一番。",
        "区域证券交易所的分析师预计本季度将较为平淡。",
        "一项调查显示，百分之{n}的经理计划提价。",
        "承包商推迟了{n}公里道路的养护工作。",
        "法院文件显示，拖欠货款引发的纠纷越来越多。",
        "市议会利用{n}个周末拓宽了环城公路。",
        "二手机械的需求依然坚挺。",
        "几家家族企业正在寻找新的东家。",
        "仓库租金已连续{n}个季度上涨。",
        "仓储站点的长时间罢工在{n}天后得以平息。",
        "在一些行业，学徒已占到员工总数的百分之{n}。",
        "地区机场每周新增{n}个货运时刻。",
    ),
    questions={
        "hq": ("1-hop", ("{x}的总部在哪里？", "{x}的总部设在哪个城市？"), ("总部", "总办事处")),
        "chair": ("1-hop", ("{x}的董事会主席是谁？", "谁担任{x}的董事会主席？"), ("董事会主席", "董事会")),
        "maker": ("1-hop", ("哪家公司生产{p}？", "{p}是谁生产的？"), ("产品", "制造商")),
        "founder": ("1-hop", ("{x}是谁创立的？", "{x}的创始人是谁？"), ("创始人",)),
        "maker-hq": ("2-hop", ("生产{p}的公司总部在哪里？",), ("制造商", "总部")),
        "acquirer-chair": ("2-hop", ("收购{x}的公司的董事会主席是谁？",), ("收购", "董事会主席")),
        "maker-founder": ("2-hop", ("生产{p}的公司是谁创立的？",), ("制造商", "创始人")),
        "products": ("list", ("{x}生产哪些产品？",), ("产品", "生产")),
        "acquisitions": ("list", ("{x}收购了哪些公司？",), ("收购", "并购")),
        "suppliers": ("list", ("哪些公司向{x}供货？",), ("供应商", "零部件")),
        "staff": ("list", ("哪些人在{x}工作？",), ("员工", "职员")),
        "plants": ("list", ("{x}在哪些城市设有工厂？",), ("工厂", "生产基地")),
        "partners": ("list", ("哪些公司与{x}合作？",), ("合作伙伴", "合作")),
        "founded-first": ("comparison", ("{x}和{y}哪家成立得更早？", "{x}与{y}相比，哪家公司历史更悠久？",
                                         "{x}是否比{y}成立得早？"), ("成立年份", "创立")),
        "more-employees": ("comparison", ("{x}和{y}哪家员工更多？", "{x}的员工是否比{y}多？",
                                          "{x}与{y}哪家雇用的人更多？"), ("员工", "员工人数")),
        "larger-revenue": ("comparison", ("{x}和{y}哪家营收更高？", "{x}的收入是否比{y}高？",
                                          "{x}与{y}哪家销售额更高？"), ("营收", "销售额")),
        "chair-acquirer-maker": ("3-hop", ("收购了{p}制造商的那家公司，其董事会主席是谁？",
                                           "接管{p}生产商的公司由谁担任董事会主席？"),
                                 ("制造商", "收购", "董事会主席")),
        "hq-acquirer-maker": ("3-hop", ("收购了{p}制造商的公司总部在哪里？",), ("制造商", "收购", "总部")),
        "founder-acquirer-employer": ("3-hop", ("收购了{p}所在公司的那家企业是谁创立的？",
                                                "{p}任职的公司被收购了，收购方的创始人是谁？"),
                                      ("雇主", "收购", "创始人")),
        "hq-acquirer-chaired": ("3-hop", ("收购了由{p}担任董事会主席的公司的那家企业，总部设在哪个城市？",),
                                ("董事会主席", "收购", "总部")),
        "alias-ceo": ("alias by full name", ("{x}的首席执行官是谁？", "谁以首席执行官身份领导{x}？"), ("首席执行官",)),
        "alias-headcount": ("alias by full name", ("{x}有多少员工？", "{x}的员工人数是多少？"), ("员工", "员工人数")),
        "alias-chair": ("alias by alias", ("{x}的董事会主席是谁？", "谁担任{x}的董事会主席？"),
                        ("董事会主席", "董事会")),
        "alias-founded": ("alias by alias", ("{x}成立于哪一年？", "{x}是哪年创立的？"), ("成立", "成立年份")),
        "para-hq": ("paraphrase", ("{x}扎根在哪座城市？", "{x}的大本营在哪里？"), ("大本营", "扎根")),
        "para-ceo": ("paraphrase", ("谁掌管{x}？", "{x}的一把手是谁？"), ("掌管", "一把手")),
        "para-chair": ("paraphrase", ("{x}的董事长是谁？", "谁执掌{x}的最高决策机构？"), ("董事长", "决策机构")),
        "para-founder": ("paraphrase", ("{x}是谁一手建立的？", "谁开办了{x}？"), ("建立", "开办")),
        "para-acquisitions": ("paraphrase", ("{x}买下了哪些公司？", "{x}都盘下过哪些企业？"), ("买下", "盘下")),
        "para-lender": ("paraphrase", ("哪家银行为{x}出钱？", "谁给{x}提供资金？"), ("银行", "资金")),
        "para-auditor": ("paraphrase", ("谁给{x}查账？", "哪家事务所核对{x}的账目？"), ("查账", "账目")),
        "fu-hq": ("follow-up", ("它的总部在哪里？", "那他们的总部设在哪里？"), ("总部",)),
        "fu-chair": ("follow-up", ("它的董事会主席是谁？", "他们的董事会由谁担任主席？"), ("董事会主席", "董事会")),
        "fu-founded": ("follow-up", ("它是什么时候成立的？", "他们是哪一年创立的？"), ("成立", "成立年份")),
        "fu-products": ("follow-up", ("他们生产什么？", "它有哪些产品？"), ("产品", "生产")),
        "attributes": ("attribute list", ("{x}成立于哪一年，有多少员工，营收是多少？",
                                          "请给出{x}的成立年份、员工人数和年营业收入。"), ("成立", "员工", "营收")),
        "now-headcount": ("updated", ("{x}现在有多少员工？", "{x}目前的员工人数是多少？"), ("员工", "员工人数")),
        "now-revenue": ("updated", ("{x}现在的年营业收入是多少？", "{x}目前公布的营收是多少？"), ("营收",)),
        "negative": ("negative", ("{x}生产{p}吗？", "{p}是{x}的产品之一吗？"), ("产品", "生产")),
        "count-products": ("count", ("{x}生产多少种产品？", "{x}一共制造几种不同的产品？"), ("产品",)),
        "count-acquisitions": ("count", ("{x}收购了多少家公司？",), ("收购",)),
        "before": ("temporal", ("在{z}之前，谁领导{x}？", "{z}接任之前，{x}的首席执行官是谁？"),
                   ("首席执行官", "前任")),
        "after": ("temporal", ("谁接替{w}出任{x}首席执行官？", "{w}之后，谁担任了{x}的首席执行官？"),
                  ("首席执行官", "继任者")),
        "sector": ("no entity", ("哪些公司活跃在{sector}领域？", "哪些企业从事{sector}业务？"), ("{sector}", "行业")),
        "sector-before": ("no entity", ("哪些{sector}企业成立于{year}年之前？",), ("{sector}", "成立")),
        "sector-larger": ("no entity", ("哪些{sector}企业的员工超过{n}人？",), ("{sector}", "员工")),
    },
    history=(("介绍一下{x}。", "{x}属于哪个行业？", "我在研究{x}。"),
             ("{x}是一家{sector}企业。", "{x}是文档中提到的{sector}企业之一。")),
    relation_keywords={
        "hq": ("总部", "所在地"), "founder": ("创始人", "创立"), "chair": ("董事会主席", "董事会"),
        "ceo": ("首席执行官", "管理层"), "former-ceo": ("前首席执行官", "任期"), "succeeded": ("继任", "接班"),
        "makes": ("产品", "生产"), "acquired": ("收购", "并购"), "supplies": ("供应商", "零部件"),
        "partner": ("合作", "合作伙伴"), "lender": ("贷款方", "授信"), "auditor": ("审计机构", "审计"),
        "plant": ("工厂", "生产基地"), "fair": ("展会", "参展"), "employs": ("员工", "任职"), "column": ("评论",),
    },
    loose_keywords=("同时提及",),
    sectors={"maritime": "航运", "agricultural": "农业机械", "textile": "纺织", "mining": "采矿", "aviation": "航空",
             "pharmaceutical": "制药", "railway": "铁路", "food": "食品加工", "energy": "能源", "printing": "印刷",
             "banking": "银行", "accounting": "会计"},
    months=tuple(f"{m}月" for m in range(1, 13)),
    paraphrase_words=("扎根", "大本营", "掌管", "一把手", "董事长", "执掌", "决策机构", "建立", "开办", "买下", "盘下",
                      "出钱", "资金", "查账", "账目", "核对"),
)
