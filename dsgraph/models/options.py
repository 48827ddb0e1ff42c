"""The architecture choices of the Graph Transformer (the ``"model"`` part of the config's
``"dsgraph"`` section). Sizes and dropout rates stay top-level keys of that section.

Every layer is multi-head scaled dot-product attention with learned Q and K over each node's
in-edges; these options say what surrounds it. The defaults are the measured best on Cora
(``tools/reports/cora_ablation.py``; docs/benchmarks/2026-12-01-cora-accuracy.md): a GAT-shaped
network (Velickovic et al., ICLR 2018) with dot-product scores.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dsgraph.graph import encodings

BLOCKS = ("attention", "transformer", "gcn", "sage")
CONV_BLOCKS = ("gcn", "sage")
EGOS = ("loop", "sep")
NORM_TYPES = ("layer", "batch")
JKS = ("none", "cat", "max")
NORMS = ("none", "pre", "post")
RESIDUALS = ("identity", "linear", "none")
HEADS = ("attention", "linear")
FEATURE_NORMS = ("none", "row")
EDGE_FEATURES = ("none", "bias", "bias_value")
GLOBAL_ATTENTIONS = ("none", "linear")
ENCODING_INPUTS = ("concat", "add")


@dataclass(kw_only=True, frozen=True, slots=True)
class ModelOptions:
    block: str = "transformer"
    """'attention': a GAT layer with dot-product scores, act(residual + dropout(concat_h attention(q, k, v)))
    with ELU (Velickovic et al. 2018); 'transformer': attention, output projection W_o, residual, then a
    GELU FFN of width ffn_mult * hidden with its own residual (Vaswani et al. 2017); 'gcn': GCN's
    aggregation D^-1/2 A D^-1/2 (h W) (Kipf and Welling 2017), 'sage': GraphSAGE's mean of the
    neighbours' h W_n plus the node's own h W_r (Hamilton et al. 2017), both in the attention layer's
    frame (norm, residual, ELU; ``dsgraph/models/conv.py``) and on the same graph-parallel path
    (attention with constant scores: a softmax of equal scores is the mean)."""
    input_projection: bool = True
    """true: a Linear(F, hidden) before the first block (a Transformer's embedding); false: the first
    attention layer reads the (dropped-out) features itself, as GAT's first layer does."""
    norm: str = "pre"
    """LayerNorm placement: 'pre' (on each sublayer's input, plus a final norm before a linear head),
    'post' (after each residual sum) or 'none'. A norm after aggregation cost 4.4 points on Cora."""
    residual: str = "identity"
    """'identity': h + branch wherever the block's input has the hidden width (not the first block when
    it reads the features); 'linear': h W_r + branch in every block (TransformerConv's root weight, the
    reference paper's X W_o + Y); 'none'."""
    head: str = "linear"
    """'attention': the last layer is attention whose values are class logits, averaged over the H heads
    (GAT's output layer; the class dim is zero-padded to a head dim the CUDA kernels support);
    'linear': a per-node classifier after the last block."""
    feature_norm: str = "none"
    """'row': divide each node's features by their L1 norm before the model (the row normalisation
    GCN and GAT apply to bag-of-words features); 'none'."""
    edge_features: str = "none"
    """How attention reads the dataset's edge features (edge_attr): 'bias', a per-head score bias
    e_ij W_b per layer, added before the softmax (Graphormer's edge encoding); 'bias_value', that and
    an edge-conditioned value v_j + e_ij W_e (TransformerConv's edge_dim; every strategy and mode,
    every backend); 'none'. Self loops the model adds get a learned
    embedding instead of features. Needs a dataset with edge_attr."""
    global_attention: str = "linear"
    """'linear': every hidden block adds a linear global attention over all nodes (elu + 1 kernel,
    Katharopoulos et al. 2020) beside its attention over in-edges, summed as GraphGPS does
    (Rampasek et al. 2022); its per-head sums are all-reduced over the ranks, one small message per
    layer (``dsgraph/models/global_attention.py``). 'none': local attention only. The output
    attention layer (head 'attention') stays local."""
    encodings: tuple[str, ...] = ()
    """Node encodings the model reads (docs/guides/encodings.md): 'rwse' (random-walk return
    probabilities), 'lappe' (Laplacian eigenvectors with their eigenvalues; each eigenvector's sign
    flips at random in training), both stored with the dataset by `dsgraph encode`, and 'degree'
    (learned embeddings of the in- and out-degree, computed at load). A dataset that lacks a stored
    one fails at start-up with the command that computes it."""
    encoding_input: str = "concat"
    """How the encodings enter: 'concat' appends them to the (normalised, dropped-out) features, so
    the input projection or the first layer reads both; 'add' projects them to the hidden width and
    adds them after the input projection (needs input_projection: true)."""
    max_degree: int = 64
    """'degree': degrees above this share the last embedding."""
    degree_dim: int = 16
    """'degree' with encoding_input 'concat': width of the degree embedding appended to the input
    (the sum of an in-degree and an out-degree embedding); with 'add' it is the hidden width."""
    ego: str = "loop"
    """How a node's own representation enters its layer: 'loop', through the self loop the run adds
    ('self_loops'), as one of its neighbours; 'sep', through its own projection h_i W_e added to the
    aggregation over its in-neighbours, which then has no added self loop (the '-sep' models of
    Platonov et al., ICLR 2023: their concat [h_i, m_i] followed by a linear map is this sum of two
    projections). 'sage' always keeps the node apart (its root weight), so it adds no self loops."""
    norm_type: str = "layer"
    """What 'norm' places: 'layer' (LayerNorm per row) or 'batch' (BatchNorm whose mean and variance
    in training are over every row of the graph, or of the global batch in sampled mode, summed over
    the ranks: 1, 2 and 4 ranks normalise alike; running statistics for evaluation;
    ``dsgraph/models/norms.py``)."""
    jk: str = "none"
    """Jumping knowledge (Xu et al., ICML 2018), with head 'linear': the classifier reads 'cat', the
    concatenation of every block's output, or 'max', their elementwise maximum; 'none': the last
    block's output only."""
    propagation_steps: int = 0
    """APPNP (Klicpera et al., ICLR 2019): K steps z <- (1 - alpha) A_hat z + alpha z0 after the
    logits z0 of either head, A_hat GCN's D^-1/2 A D^-1/2 over the graph the layers attend over
    (with the self loops the run adds; in sampled mode the rank's sampled subgraph); the
    graph-parallel aggregation of block 'gcn', on every strategy and mode
    (``dsgraph/models/propagation.py``). 0: off; the paper uses 10."""
    propagation_alpha: float = 0.1
    """APPNP's teleport probability alpha, 0 < alpha <= 1 (1: no propagation); the paper uses 0.1."""

    def __post_init__(self) -> None:
        for name, choices in (
            ("block", BLOCKS),
            ("ego", EGOS),
            ("norm_type", NORM_TYPES),
            ("jk", JKS),
            ("norm", NORMS),
            ("residual", RESIDUALS),
            ("head", HEADS),
            ("feature_norm", FEATURE_NORMS),
            ("encoding_input", ENCODING_INPUTS),
            ("edge_features", EDGE_FEATURES),
            ("global_attention", GLOBAL_ATTENTIONS),
        ):
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"'model.{name}' must be one of {', '.join(choices)}; got {value!r}")
        object.__setattr__(self, "encodings", tuple(self.encodings))
        known = encodings.encoding_names()  # the registry (dsgraph/graph/encodings/), read when validating
        wrong = [name for name in self.encodings if name not in known]
        if wrong or len(set(self.encodings)) != len(self.encodings):
            raise ValueError(
                f"'model.encodings' must list distinct names among {', '.join(known)}; got {list(self.encodings)}"
            )
        for name in ("max_degree", "degree_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"'model.{name}' must be >= 1, got {getattr(self, name)}")
        if self.propagation_steps < 0:
            raise ValueError(f"'model.propagation_steps' must be >= 0 (0: off), got {self.propagation_steps}")
        if not 0 < self.propagation_alpha <= 1:
            raise ValueError(f"'model.propagation_alpha' must be in (0, 1], got {self.propagation_alpha}")
        if self.encodings and self.encoding_input == "add" and not self.input_projection:
            raise ValueError(
                "'model.encoding_input' 'add' adds the encodings after the input projection; set "
                "'model.input_projection': true, or use 'concat'"
            )

        _check_combinations(self)

    @classmethod
    def from_dict(cls, section: dict) -> ModelOptions:
        """The ``"model"`` object of a config: unknown keys and wrong types are errors that name them."""
        if not isinstance(section, dict):
            raise ValueError(f"'model' must be a JSON object of {', '.join(option_names())}; got {section!r}")
        unknown = sorted(set(section) - set(option_names()))
        if unknown:
            raise ValueError(
                f'unknown key(s) {", ".join(repr(k) for k in unknown)} in "model"; '
                f"valid keys: {', '.join(option_names())}"
            )
        for f in dataclasses.fields(cls):
            if f.name not in section:
                continue
            value, want = section[f.name], _TYPES[f.type]
            listed = isinstance(value, (list, tuple)) and all(type(v) is str for v in value)
            number = want is float and type(value) is int  # JSON's 1 for 1.0
            if not (listed if want is list else type(value) is want or number):
                raise ValueError(
                    f"'model.{f.name}' must be {'a list of strings' if want is list else want.__name__}, got {value!r}"
                )
        return cls(**section)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "encodings": list(self.encodings)}

    @property
    def reads_edges(self) -> bool:
        """Whether the model reads edge features (the data must then carry them)."""
        return self.edge_features != "none"

    @property
    def aggregates_self(self) -> bool:
        """Whether a node's aggregation includes the node itself (the run then adds self loops)."""
        return self.ego == "loop" and self.block != "sage"


def _check_combinations(o: ModelOptions) -> None:
    if o.block in CONV_BLOCKS and o.edge_features != "none":
        raise ValueError(
            f"'model.edge_features' '{o.edge_features}' is a score bias of attention; block '{o.block}' has no "
            'scores: set "edge_features": "none" or use an attention block'
        )
    if o.jk != "none" and o.head != "linear":
        raise ValueError(f"'model.jk' '{o.jk}' feeds the classifier; it needs 'model.head': 'linear'")


_TYPES = {"bool": bool, "str": str, "int": int, "float": float, "tuple[str, ...]": list}


def option_names() -> list[str]:
    return [f.name for f in dataclasses.fields(ModelOptions)]


TRANSFORMER = ModelOptions(
    block="transformer", input_projection=True, norm="pre", residual="identity", head="linear", global_attention="none"
)
"""The pre-LN Transformer block with a final norm and a per-node classifier, local attention only:
the shape of PyG's TransformerConv models and of the benchmarks that compare with them (the default
is this plus linear global attention)."""
GAT = ModelOptions(
    block="attention",
    input_projection=False,
    norm="none",
    residual="identity",
    head="attention",
    feature_norm="none",
    global_attention="none",
)
"""GAT's shape (Velickovic et al. 2018; the earlier default): attention layers with ELU, the last one
attending with class logits; Cora's preset (ds_configs/cpu_quickstart.json) adds row-normalised
features and dropout 0.6."""
