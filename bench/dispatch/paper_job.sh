# Sourced by the dispatch benchmarks: the job file of bench/results/quality.md
# ("paper.ini": n = 8, 4 x 5G + 4 x 0.5G, m = 128, 512-float rows, SGD,
# cache 8 %, 200 iterations, no compute).
#
#   paper_job FILE STREAM [METHOD]
#
# writes it to FILE reading STREAM ("none": each run sets data.stream);
# with METHOD it has a [dispatch] section choosing it, without one it is
# what a user's job file runs (the runtime's default method, sizes fitted
# online).
paper_job() {
	local file=$1 stream=$2 method=${3-}
	{
		printf '[job]\nseed = 1\niterations = 200\n'
		printf '[workers]\nn = 8\nbatch = 128\nrates = 5G,5G,5G,5G,0.5G,0.5G,0.5G,0.5G\n'
		printf 'compute_ns_per_sample = 0\n'
		printf '[model]\ndim = 512\noptimizer = sgd\n'
		printf '[cache]\nratio = 0.08\n'
		[ -z "$method" ] || printf '[dispatch]\nmethod = %s\n' "$method"
		printf '[data]\nstream = %s\n' "$stream"
	} >"$file"
}
