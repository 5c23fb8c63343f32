"""What a `custom_sql` rule's plan may contain, as Spark's own classes: the allow-lists `plan_guard.py` walks by.

Everything not listed here is refused, so a function Spark adds in its next release is refused until someone
decides it is pure and adds it (with the group's reason). Names are relative to `org.apache.spark.sql.catalyst.`
(`expressions.` for expressions); the classes are those Spark 4.1's analyzer puts in a plan, plus the parser's
unresolved forms that the analyzer turns into them. Reasons for the best-known refusals are in `REFUSED`.
"""

from __future__ import annotations

CATALYST = "org.apache.spark.sql.catalyst."


def _expr(*groups: str) -> frozenset[str]:
    return frozenset(f"expressions.{name}" for group in groups for name in group.split())


# Query operators: what a SELECT (joins, set operations, grouping, windows, CTEs, generators, VALUES, hints) is
# made of, parsed and analysed. Commands, data sources, scripts, EXECUTE IMMEDIATE, streaming and the IDENTIFIER
# clause are plan nodes too, and none of them is here (time travel is a relation: below).
PLAN_NODES = frozenset(
    f"plans.logical.{n}"
    for n in """
    Project Filter Aggregate Join Union Intersect Except Distinct Sort GlobalLimit LocalLimit Offset Tail
    SubqueryAlias UnresolvedWith WithCTE CTERelationDef CTERelationRef OneRowRelation LocalRelation Range
    Generate Window WithWindowDefinition Expand Pivot Unpivot LateralJoin Deduplicate Sample
    RepartitionByExpression Repartition UnresolvedHint ResolvedHint ResolvedInlineTable
    """.split()
) | frozenset(
    f"analysis.{n}"
    for n in "UnresolvedHaving UnresolvedInlineTable UnresolvedSubqueryColumnAliases UnresolvedTVFAliases".split()
)
# `FROM t |> ...`: pipe syntax's marker is a plan node of the expressions package.
PLAN_NODES |= {"expressions.PipeOperator"}
# Relations: checked by name, never walked into (the staged rows' own plan is the pipeline's, not the rule's).
UNRESOLVED_RELATION = "analysis.UnresolvedRelation"
# `t VERSION AS OF v` / `t TIMESTAMP AS OF ts`: a read of a version of table `t` (an ODS table's day is its tag),
# allowed when `t` is a declared table (`plan_walk.Walker._time_travel`; its relation is a field, not a child).
TIME_TRAVEL = "analysis.RelationTimeTravel"
UNRESOLVED_TABLE_FUNCTION = "analysis.UnresolvedTableValuedFunction"
VIEW = "plans.logical.View"
TABLE_RELATIONS = frozenset(
    {
        "org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation",  # the warehouse's Iceberg tables
        "org.apache.spark.sql.execution.datasources.LogicalRelation",  # a table of Spark's built-in catalog
        "catalog.HiveTableRelation",
    }
)
# Table-valued functions that only make rows from their arguments (FROM range(3), FROM explode(array(...))).
TABLE_FUNCTIONS = frozenset(
    "range explode explode_outer posexplode posexplode_outer inline inline_outer stack json_tuple".split()
)

EXPRESSIONS = (
    # Structure: columns, literals, casts, aliases, sort orders, aggregate and window wrappers, lambdas,
    # subqueries (their plans are walked like the query's), field access, the analyzer's own helpers.
    _expr(
        """Alias AttributeReference Literal Cast SortOrder WindowExpression WindowSpecDefinition
        SpecifiedWindowFrame UnspecifiedFrame$ RowFrame$ RangeFrame$ CurrentRow$ UnboundedPreceding$
        UnboundedFollowing$ LambdaFunction NamedLambdaVariable ScalarSubquery ListQuery InSubquery Exists
        LateralSubquery OuterReference GetStructField GetArrayStructFields GetArrayItem GetMapValue KnownNullable
        KnownNotNull With CommonExpressionDef CommonExpressionRef TryEval PreciseTimestampConversion
        ResolvedCollation Grouping GroupingID Rollup Cube GroupingSets aggregate.AggregateExpression
        UnresolvedNamedLambdaVariable PipeExpression UnresolvedWindowExpression"""
    )
    # The parser's unresolved forms (function names are checked against the builtin registry, below).
    | frozenset(
        f"analysis.{n}"
        for n in """UnresolvedAttribute UnresolvedFunction UnresolvedAlias UnresolvedStar UnresolvedStarExcept
        UnresolvedExtractValue UnresolvedOrdinal UnresolvedGenerator
        UnresolvedWindowExpression UnresolvedSeed UnresolvedPlanId""".split()
    )
    # Arithmetic and math.
    | _expr(
        """Abs Acos Acosh Add Asin Asinh Atan Atan2 Atanh BRound Bin Cbrt Ceil Conv Cos Cosh Cot Csc Divide
        EulerNumber Exp Expm1 Factorial Floor Greatest Hypot IntegralDivide Least Log Log10 Log1p Log2 Logarithm
        Multiply Pi Pmod Pow Rand Randn Remainder Rint Round RoundCeil RoundFloor Sec Signum Sin Sinh Sqrt
        Subtract Tan Tanh ToDegrees ToRadians TryAdd TryDivide TryMod TryMultiply TrySubtract UnaryMinus
        UnaryPositive Uniform WidthBucket Hex Unhex BitwiseAnd BitwiseCount BitwiseGet BitwiseNot BitwiseOr
        BitwiseXor ShiftLeft ShiftRight ShiftRightUnsigned"""
    )
    # Comparison, logic and conditionals.
    | _expr(
        """And Or Not EqualTo EqualNullSafe EqualNull GreaterThan GreaterThanOrEqual LessThan LessThanOrEqual
        In InSet IsNaN IsNull IsNotNull Like ILike RLike Between CaseWhen Coalesce If NaNvl NullIf NullIfZero
        Nvl Nvl2 ZeroIfNull"""
    )
    # Strings (in memory only: no charset or regex reaches outside the JVM's heap).
    | _expr(
        """Ascii Base64 UnBase64 BinaryPad BitLength Chr Collate Collation Concat ConcatWs Contains Decode
        StringDecode Elt Encode EndsWith StartsWith FindInSet FormatNumber FormatString InitCap IsValidUTF8 Left
        Right Length Levenshtein Lower Upper Luhncheck MakeValidUTF8 Mask OctetLength Overlay Quote RandStr
        RegExpCount RegExpExtract RegExpExtractAll RegExpInStr RegExpReplace RegExpSubStr Sentences SoundEx
        SplitPart StringInstr StringLocate StringLPad StringRPad StringRepeat StringReplace StringSpace
        StringSplit StringTranslate StringTrim StringTrimBoth StringTrimLeft StringTrimRight Substring
        SubstringIndex ToBinary TryToBinary ToCharacter ToNumber TryToNumber TryValidateUTF8 ValidateUTF8"""
    )
    # Dates, times and intervals.
    | _expr(
        """AddMonths ConvertTimezone CurrentDate CurrentTime CurrentTimeZone CurrentTimestamp Now LocalTimestamp
        DateAdd DateSub DateDiff DateAddYMInterval DatetimeSub DivideYMInterval MultiplyYMInterval
        TimestampAddInterval DateFormatClass DateFromUnixDate DayName DayOfMonth DayOfWeek DayOfYear Extract
        ExtractANSIIntervalDays ExtractANSIIntervalMinutes ExtractANSIIntervalMonths ExtractANSIIntervalSeconds
        FromUTCTimestamp ToUTCTimestamp FromUnixTime Hour Minute Second SecondWithFraction LastDay MakeDTInterval
        MakeYMInterval MakeDate MakeInterval TryMakeInterval MakeTimestamp MakeTimestampNTZ
        MakeTimestampFromDateTime TryMakeTimestamp TryMakeTimestampFromDateTime MicrosToTimestamp
        MillisToTimestamp SecondsToTimestamp Month MonthName MonthsBetween NextDay ParseToDate ParseToTimestamp
        Quarter ToUnixTimestamp UnixTimestamp TruncDate TruncTimestamp UnixDate UnixMicros UnixMillis
        UnixSeconds WeekDay WeekOfYear Year"""
    )
    # Aggregates (incl. sketches, which only summarise their input).
    | _expr(
        """aggregate.AnyValue aggregate.ApproxTopK aggregate.ApproxTopKAccumulate aggregate.ApproxTopKCombine
        ApproxTopKEstimate aggregate.ApproximatePercentile aggregate.Average aggregate.BitAndAgg
        aggregate.BitOrAgg aggregate.BitXorAgg aggregate.BoolAnd aggregate.BoolOr aggregate.CollectList
        aggregate.CollectSet aggregate.Corr aggregate.Count aggregate.CountIf aggregate.CountMinSketchAgg
        aggregate.CovPopulation aggregate.CovSample aggregate.First aggregate.Last aggregate.HistogramNumeric
        aggregate.HyperLogLogPlusPlus aggregate.Kurtosis aggregate.Skewness aggregate.ListAgg aggregate.Max
        aggregate.MaxBy aggregate.Median aggregate.Min aggregate.MinBy aggregate.Mode aggregate.Percentile
        aggregate.PercentileCont aggregate.PercentileDisc aggregate.RegrAvgX aggregate.RegrAvgY
        aggregate.RegrCount aggregate.RegrIntercept aggregate.RegrR2 aggregate.RegrSXX aggregate.RegrSXY
        aggregate.RegrSYY aggregate.RegrSlope aggregate.StddevPop aggregate.StddevSamp aggregate.Sum
        aggregate.VariancePop aggregate.VarianceSamp BitmapAndAgg BitmapConstructAgg BitmapOrAgg
        BitmapBitPosition BitmapBucketNumber BitmapCount aggregate.HllSketchAgg aggregate.HllUnionAgg
        HllSketchEstimate HllUnion aggregate.KllSketchAggBigint aggregate.KllSketchAggDouble
        aggregate.KllSketchAggFloat KllSketchGetNBigint KllSketchGetNDouble KllSketchGetNFloat
        KllSketchGetQuantileBigint KllSketchGetQuantileDouble KllSketchGetQuantileFloat KllSketchGetRankBigint
        KllSketchGetRankDouble KllSketchGetRankFloat KllSketchMergeBigint KllSketchMergeDouble
        KllSketchMergeFloat KllSketchToStringBigint KllSketchToStringDouble KllSketchToStringFloat
        aggregate.ThetaSketchAgg aggregate.ThetaUnionAgg aggregate.ThetaIntersectionAgg ThetaDifference
        ThetaIntersection ThetaSketchEstimate ThetaUnion"""
    )
    # Window functions.
    | _expr("CumeDist DenseRank Lag Lead NTile NthValue PercentRank Rank RowNumber")
    # Collections, maps, structs, higher-order functions and generators.
    | _expr(
        """ArrayAppend ArrayCompact ArrayContains ArrayDistinct ArrayExcept ArrayInsert ArrayIntersect ArrayJoin
        ArrayMax ArrayMin ArrayPosition ArrayPrepend ArrayRemove ArrayRepeat ArraySize ArrayUnion ArraysOverlap
        ArraysZip CreateArray Flatten Get Sequence Shuffle Slice SortArray ElementAt TryElementAt Reverse Size
        CreateMap MapConcat MapContainsKey MapEntries MapFromArrays MapFromEntries MapKeys MapValues StringToMap
        CreateNamedStruct ArrayAggregate ArrayExists ArrayFilter ArrayForAll ArraySort ArrayTransform MapFilter
        MapZipWith TransformKeys TransformValues ZipWith Explode PosExplode Inline Stack GeneratorOuter"""
    )
    # Hashing.
    | _expr("Crc32 Md5 Murmur3Hash Sha1 Sha2 XxHash64")
    # JSON, CSV and VARIANT text in a column (their options configure parsing only, nothing is fetched).
    | _expr(
        """GetJsonObject JsonObjectKeys JsonToStructs JsonTuple LengthOfJsonArray SchemaOfJson StructsToJson
        CsvToStructs SchemaOfCsv StructsToCsv variant.IsVariantNull variant.ParseJson variant.SchemaOfVariant
        variant.SchemaOfVariantAgg variant.ToVariantObject variant.VariantGet"""
    )
    # URL text (java.net.URI parsing and percent-coding; no connection is made).
    | _expr("ParseUrl TryParseUrl UrlDecode TryUrlDecode UrlEncode")
    # Row identity and types: pure, if not deterministic.
    | _expr("MonotonicallyIncreasingID SparkPartitionID TypeOf Uuid")
)

# Registry classes that build one of the expressions above (the analyzer then checks the built class).
BUILDERS = _expr(
    """CeilExpressionBuilder FloorExpressionBuilder CollateExpressionBuilder ContainsExpressionBuilder
    StartsWithExpressionBuilder EndsWithExpressionBuilder CurDateExpressionBuilder DatePartExpressionBuilder
    HourExpressionBuilder MinuteExpressionBuilder SecondExpressionBuilder LPadExpressionBuilder
    RPadExpressionBuilder MaskExpressionBuilder ToCharacterBuilder MakeTimestampExpressionBuilder
    MakeTimestampLTZExpressionBuilder MakeTimestampNTZExpressionBuilder TryMakeTimestampExpressionBuilder
    TryMakeTimestampLTZExpressionBuilder TryMakeTimestampNTZExpressionBuilder ParseToTimestampLTZExpressionBuilder
    ParseToTimestampNTZExpressionBuilder TryToDateExpressionBuilder TryToTimestampExpressionBuilder
    ExplodeExpressionBuilder PosExplodeExpressionBuilder InlineExpressionBuilder aggregate.ModeBuilder
    aggregate.PercentileContBuilder aggregate.PercentileDiscBuilder aggregate.TryAverageExpressionBuilder
    aggregate.TrySumExpressionBuilder aggregate.CountMinSketchAggExpressionBuilder
    variant.ParseJsonExpressionBuilder variant.TryParseJsonExpressionBuilder variant.VariantGetExpressionBuilder
    variant.TryVariantGetExpressionBuilder"""
)

_JVM = "calls a Java method in the Spark JVM"
_XML = "runs the JVM's XML parser, which fetches external entities and schemas (URLs, files)"
_FILE = "loads a schema or descriptor file from a path"
# Why the best-known refusals are refused (by simple class name); anything else unlisted is simply not allowed.
REFUSED = {
    "CallMethodViaReflection": _JVM,
    "TryReflect": _JVM,
    "XmlToStructs": _XML,
    "SchemaOfXml": _XML,
    "StructsToXml": "belongs to the XML functions, refused as a group",
    **{f"XPath{k}": _XML for k in ("List", "Boolean", "Double", "Float", "Int", "Long", "Short", "String")},
    "FromAvro": _FILE,
    "ToAvro": _FILE,
    "SchemaOfAvro": _FILE,
    "FromProtobuf": _FILE,
    "ToProtobuf": _FILE,
    "InputFileName": "reveals the paths of the files read",
    "InputFileBlockStart": "reveals the files read",
    "InputFileBlockLength": "reveals the files read",
    "ScalaUDF": "runs user code (a UDF)",
    "ScalaUDAF": "runs user code (a UDF)",
    "PythonUDF": "runs user code (a Python UDF)",
    "PythonUDAF": "runs user code (a Python UDF)",
    "HiveSimpleUDF": "runs user code (a Hive UDF)",
    "HiveGenericUDF": "runs user code (a Hive UDF)",
    "CurrentUser": "reveals the session's user",
    "SparkVersion": "reveals the engine's version",
    "AesEncrypt": "is cryptography with a key, not data quality",
    "AesDecrypt": "is cryptography with a key, not data quality",
    "TryAesDecrypt": "is cryptography with a key, not data quality",
    "RaiseError": "raises an error carrying any text",
    "AssertTrue": "raises an error carrying any text",
    "NamedParameter": "is a parameter marker, bound at run time",
    "PosParameter": "is a parameter marker, bound at run time",
    "VariableReference": "reads a session variable",
    "ExpressionWithUnresolvedIdentifier": "names an object at run time (IDENTIFIER clause)",
    "PlanWithUnresolvedIdentifier": "names a relation at run time (IDENTIFIER clause)",
    "ScriptTransformation": "runs a shell command (TRANSFORM ... USING)",
    "UnresolvedExecuteImmediate": "runs a statement built at run time (EXECUTE IMMEDIATE)",
    "CompoundBody": "is a SQL script",
}


def full(name: str) -> str:
    """The JVM class name of an allow-list entry."""
    return CATALYST + name


def short(class_name: str) -> str:
    """An allow-list entry of a JVM class name (the inverse of `full`)."""
    return class_name.removeprefix(CATALYST)


def reason(class_name: str) -> str:
    simple = class_name.rsplit(".", 1)[-1].rstrip("$")
    return REFUSED.get(
        simple, "it is not on the allow-list of pure functions (sharp_dagster/dqc/allowlist.py)"
    )


def node_reason(class_name: str) -> str:
    simple = class_name.rsplit(".", 1)[-1]
    return REFUSED.get(
        simple, "it is not a query operator on the allow-list (sharp_dagster/dqc/allowlist.py)"
    )
