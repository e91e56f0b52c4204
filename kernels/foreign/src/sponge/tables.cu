// The sponge's constants (include/foreign/sponge.cuh declares them): the only definitions,
// shared by every file of the module through the device link.
#include "foreign/sponge.cuh"

namespace sponge {

__constant__ uint32_t RC[ROUNDS][WIDTH] = {
    {0x1b2c3d4eu, 0x05f60718u, 0x292a3b4cu, 0x5d6e7f01u, 0x12233445u, 0x56677889u, 0x1aabbccdu, 0x0eeff001u},
    {0x31415926u, 0x53589793u, 0x23846264u, 0x33832795u, 0x02884197u, 0x16939937u, 0x51058209u, 0x74944592u},
    {0x27182818u, 0x28459045u, 0x23536028u, 0x74713526u, 0x62497757u, 0x24709369u, 0x59957496u, 0x69676277u},
    {0x14142135u, 0x62373095u, 0x04880168u, 0x72420969u, 0x08074688u, 0x33031251u, 0x06715744u, 0x61443092u},
    {0x17320508u, 0x07568877u, 0x29352744u, 0x63406711u, 0x45234898u, 0x10034132u, 0x52305489u, 0x68163122u},
    {0x16180339u, 0x08874989u, 0x48482045u, 0x48864389u, 0x44364546u, 0x30321432u, 0x51172407u, 0x51029731u},
};

__constant__ uint32_t ROT[ROUNDS] = {1, 3, 5, 2, 7, 4};

__device__ unsigned long long permutations = 0;

}  // namespace sponge
