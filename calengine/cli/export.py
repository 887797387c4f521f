"""``calengine export``: a saved model as a file another engine scores with (SQL, ONNX, an MLflow model).

A shell over :func:`calengine.export.write.export_model`."""

from __future__ import annotations

import sys

from . import options


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export", help="write a model as SQL that scores rows where they live, as ONNX, or as an MLflow model",
        description="Write MODEL_DIR as one SELECT over a relation (--table, default 'input') returning its columns"
        " plus p_<class> per class, and PATH.manifest.json naming the model's content hash. SQL expresses models"
        " of score columns (calengine fit --scores ...) with the sigmoid, sigmoid_nobias, temperature, beta, isotonic,"
        " binning, rocch and venn_abers calibrators (for several classes with the normalize combiner) or a"
        " multiclass scaling (temperature, vector_scaling, matrix_scaling, dirichlet), and models of a"
        " fitted logistic_regression or linear_svm (any number of classes) or two-class gaussian_nb, bernoulli_nb or"
        " multinomial_nb on numeric and categorical columns. --format onnx writes the same maps of score"
        " columns as an ONNX graph (opset 17, double precision; inputs named after the score columns, output"
        " 'probabilities' of shape [N, k]; needs pip install 'calengine[onnx]'). --format mlflow writes PATH as an"
        " MLflow model directory (needs pip install 'calengine[mlflow]') whose pyfunc scores a pandas DataFrame"
        " into p_<class> columns, for every model.",
    )
    p.add_argument("model", metavar="MODEL_DIR")
    p.add_argument("--format", required=True, choices=("sql", "onnx", "mlflow"),
                   help="sql: one SELECT; onnx: an ONNX model file; mlflow: an MLflow model directory")
    p.add_argument("--dialect", default="duckdb", choices=("duckdb", "spark", "postgres"),
                   help="SQL dialect (default duckdb; sql only)")
    p.add_argument("--table", default="input", metavar="NAME", help="the relation the query reads (default input; sql only)")
    p.add_argument("--output", required=True, metavar="PATH", help="file (sql, onnx) or directory (mlflow) to write")
    p.add_argument("--overwrite", action="store_true", help="replace PATH and its manifest if they exist")
    p.add_argument("--sets", action="store_true",
                   help="a model with a conformal layer (calengine conformal): also its prediction sets, SQL columns"
                   " in_<class> and set_size, ONNX outputs in_set [N, k] and set_size [N] (scores lac and topk,"
                   " marginal or --mondrian class)")
    options.add_trust_option(p)


def run(args) -> int:
    from ..export.write import export_model

    side = export_model(args.model, args.format, args.output, dialect=args.dialect, table=args.table,
                        trust=args.trust_type or (), overwrite=args.overwrite, sets=args.sets)
    sys.stderr.write(f"exported {args.format} -> {args.output} (manifest {side})\n")
    return 0
