/* Error strings for the 0 / -errno convention, including our own codes. */
#include <esd/err.h>

const char *esd_strerror(int rc)
{
	switch (-rc) {
	case 0:
		return "success";
	case ESD_EBADMAGIC:
		return "bad magic";
	case ESD_EBADVERSION:
		return "unsupported version";
	case ESD_EBADSUM:
		return "checksum mismatch";
	case ESD_EDIVERGED:
		return "dispatch decisions diverged between nodes";
	case ESD_ESTREAM:
		return "the data stream differs between processes";
	case ESD_EJOBFAILED:
		return "a PS shard failed the job";
	case ESD_EROLLBACK:
		return "the shard went back to a checkpoint";
	default:
		return strerror(rc < 0 ? -rc : rc);
	}
}
