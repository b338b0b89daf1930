# Translation: for each seed of a training job, average its last N checkpoints (seed<N>/averaged.pt),
# then beam search on the test set and BLEU both ways (seed<N>/eval.json). Its params are the
# evaluation spec only: changing beam or average_last never retrains.
# (Classification is evaluated every epoch by its training job.)


rule evaluate_translation:
    input:
        trained="results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/trained.json",
        data=f"{DATA}/{{dataset}}/prepared.json",
    output:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/evaluated.json",
    params:
        spec=eval_spec("translation"),
        seeds=job_seeds("translation"),
        cell=cell_dir,
    log:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/evaluate.log",
    benchmark:
        "results/{scale}/translation/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/evaluate.benchmark.tsv"
    threads: 1
    priority: PRIORITY["evaluation"]
    resources:
        gpu=single_gpu(),
        mem_mb=needs("evaluate_translation", "mem_mb"),
        runtime=runtime_of_seeds("evaluate_translation", "translation"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro launch --gpus {resources.gpu} -- evaluate-translation --spec {params.spec:q} --seeds {params.seeds}"
        " --data $(dirname {input.data}) --cell-dir {params.cell} --done {output} --threads {threads} 2> {log}"


# Captioning: per seed, average its last N checkpoints, caption the test images with beam search,
# and score them with the COCO toolkit (seed<N>/captions.tsv, seed<N>/eval.json).


rule evaluate_captioning:
    input:
        trained="results/{scale}/captioning/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/trained.json",
        data=f"{DATA}/{{dataset}}/prepared.json",
    output:
        "results/{scale}/captioning/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/evaluated.json",
    params:
        spec=eval_spec("captioning"),
        seeds=job_seeds("captioning"),
        cell=cell_dir,
    log:
        "results/{scale}/captioning/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/evaluate.log",
    benchmark:
        "results/{scale}/captioning/{dataset}/{arch}/{recipe}/{variant}/seeds{seeds}/evaluate.benchmark.tsv"
    threads: 1
    priority: PRIORITY["evaluation"]
    resources:
        gpu=single_gpu(),
        mem_mb=needs("evaluate_captioning", "mem_mb"),
        runtime=runtime_of_seeds("evaluate_captioning", "captioning"),
    conda:
        "../../envs/resrepro.yaml"
    shell:
        "resrepro launch --gpus {resources.gpu} -- evaluate-captioning --spec {params.spec:q} --seeds {params.seeds}"
        " --data $(dirname {input.data}) --cell-dir {params.cell} --done {output} --threads {threads} 2> {log}"
