# One training rule a task (TASKS), one job per cell and group of seeds (seeds_per_job): it trains
# its seeds one after another in one process, each into its own seed<N>/ folder (metrics.json,
# train_log.csv, checkpoints/), and writes the job's trained.json last. Checkpoints are not
# declared outputs, so a failed or killed job keeps them and its rerun resumes each seed from its
# last finished epoch; seeds already finished only rewrite their metrics. With seeds_in_parallel > 1
# its seeds train side by side, each its own process on the job's device; with seeds_stacked, a
# classification job's seeds train as one program (stacked models); resources, not params:
# changing them retrains nothing.
# A run longer than the job's runtime (at most max_job_minutes) stops at a checkpoint before the
# limit and fails the job; its retries continue it, each in a new job, and append to its log.
# Translation with several GPUs runs torchrun ranks inside its one job (one Slurm allocation).


for task, rules in TASKS.items():

    rule:
        name:
            rules["train"]
        input:
            data=task_data(task),
        output:
            layout.job_file("trained.json", task),
        params:
            task=task,
            spec=run_spec(task),
            seeds=job_seeds(task),
            cell=cell_dir,
            data=data_argument(task),
        log:
            layout.job_file("train.log", task),
        benchmark:
            layout.job_file("train.benchmark.tsv", task)
        threads: seeds_at_once(task)  # a core for each process; each sets torch's threads to its share
        resources:
            gpu=training_gpus(task),
            mem_mb=memory_of_training(rules["train"], task),
            runtime=runtime_of_training(rules["train"], task),
            seeds_at_once=seeds_at_once(task),
            stacked=int(task == "classification" and config.get("seeds_stacked", False)),
        retries: training_retries(rules["train"], task)
        priority: rules["priority"]
        conda:
            "../../envs/resrepro.yaml"
        shell:
            # launch: the job's GPUs (their lock held till the end), or none visible when it holds none
            "resrepro launch --gpus {resources.gpu} -- train {params.task} --spec {params.spec:q} --seeds {params.seeds}"
            " --data {params.data} --cell-dir {params.cell} --done {output} --threads {threads}"
            " --parallel {resources.seeds_at_once} --stack {resources.stacked} --minutes {resources.runtime} 2>> {log}"
