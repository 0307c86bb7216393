// POST /api/v1/payments: create a payment, protected by the idempotency store (transactional mode).
import { onlyPost } from '@/app/_lib/method-not-allowed';
import { runtime } from '@/app/_lib/runtime';

export const dynamic = 'force-dynamic';

export async function POST(request: Request): Promise<Response> {
  return (await runtime()).demo.payments(request);
}

export const { GET, PUT, PATCH, DELETE } = onlyPost();
